"""What ties the stages together: the side effects each transition starts (checked at
start-up), the sweeps the scheduler runs, and the demo that walks one experiment through.

May import: every other package."""
