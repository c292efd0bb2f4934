"""IoT device events: the running example of the Structured Streaming talks."""
