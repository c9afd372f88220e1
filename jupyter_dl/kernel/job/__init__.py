"""Kernel side of one job, in parts: what travels (work), where it runs and what is shipped (placement), how ranks
find each other (route), watching the ranks (monitor, feed) and what their outcomes mean (outcomes). `JobRun`
(job_run) holds one job's run state; `runner.JobRunner` ties the parts together."""
