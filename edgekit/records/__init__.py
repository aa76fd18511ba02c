"""What a measurement writes and reads back: bench results (result), instruction counts (instructions), their statistics (stats). Below every stage that measures, gates or checks."""
