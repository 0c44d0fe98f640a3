"""flow-jobs: declarative windowed aggregations as managed Spark Structured Streaming queries."""

__version__ = "0.1.0"
