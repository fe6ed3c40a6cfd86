"""What the sandbox's trusted front and its isolated workers exchange: length-prefixed frames,
canonical values and the isolation levels a worker reports. Standard library only."""
