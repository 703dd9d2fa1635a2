"""The workflow engine: experiments and their fields, the one transition function and the
status facts (lifecycle), markers, the stage stepper, agent runs and their events, the job
queues, parked runs waiting on their children, starting agent runs, and notifications.

May import: core, code, claude."""
