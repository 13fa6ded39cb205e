"""Windows of time: steps and the step that launched each device op, start-up, one-off user calls, capture notes."""
