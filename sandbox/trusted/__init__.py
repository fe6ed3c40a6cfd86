"""The sandbox's trusted front, in the caller's process: the pool, test plans, judging, the
result cache, the handles on the worker processes and the build of the zygote's C loop."""
