"""The training objectives, one module each (pipeline.objectives.<name>)."""
