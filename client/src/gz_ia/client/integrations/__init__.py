"""Agent frameworks reporting to gz-ia through their own extension points (each needs its extra)."""
