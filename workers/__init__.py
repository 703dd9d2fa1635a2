"""RQ side of Sagan: queue names and limits, the job runtime, the scheduler, the launcher.

Jobs are thin: they take ids, run inside an application context (workers.runtime) and
call services; they never hold state another process needs.
"""
