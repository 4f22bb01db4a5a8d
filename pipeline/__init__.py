"""The science and the stages: plain Python, usable from a notebook or a Ray job. Never imports prefect."""
