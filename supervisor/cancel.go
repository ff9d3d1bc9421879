package supervisor

// cancelWakeEvent: a cancel was requested for a running job (the id); the
// loop looks whether it holds it.
type cancelWakeEvent struct{ jobID string }

func (cancelWakeEvent) isEvent() {}
