"""Who did it: the host op behind each device op, what each host thread was doing, the user's culprit and framework."""
