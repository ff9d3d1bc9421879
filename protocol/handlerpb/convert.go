package handlerpb

import (
	"errors"
	"fmt"

	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// Conversions between the gRPC messages and the protocol package's messages
// (docs/protocol.md, "The unix transport (gRPC)").

// FromJob is the Execute request for a job.
func FromJob(j *protocol.Job) *Job {
	args := string(j.Args)
	if len(j.Args) == 0 {
		args = "{}"
	}
	return &Job{
		Id: j.ID, Name: j.Name, ArgsJson: args, Attempt: int32(j.Attempt), MaxAttempts: int32(j.MaxAttempts),
		Queue: j.Queue, DeadlineMs: j.Deadline, Traceparent: j.Traceparent,
		WorkerId: j.WorkerID, ScheduledAtMs: j.ScheduledAt, CreatedAtMs: j.CreatedAt,
	}
}

// viaFrame puts a message from the handler through the stdio codec: it is
// encoded to its frame and decoded with the frame limit, so the unix
// transport accepts exactly what stdio accepts.
func viaFrame(m protocol.Message, maxFrame int) (protocol.Message, error) {
	frame, err := protocol.Marshal(m)
	if err != nil {
		return nil, err
	}
	return protocol.DecodeLimit(frame, maxFrame)
}

// ToProtocol checks a Describe answer as the hello frame it stands for.
func (d *Hello) ToProtocol(maxFrame int) (*protocol.Hello, error) {
	h := &protocol.Hello{Protocol: int(d.GetProtocol()), SDK: d.GetSdk(), PID: int(d.GetPid()),
		Concurrency: int(d.GetConcurrency()), SyncConcurrency: int(d.GetSyncConcurrency())}
	for _, j := range d.GetJobs() {
		h.Jobs = append(h.Jobs, protocol.HelloJob{Name: j.GetName(), Cancellable: j.GetCancellable()})
	}
	if h.SyncConcurrency < 0 {
		return nil, fmt.Errorf("hello: sync_concurrency %d < 0", h.SyncConcurrency)
	}
	m, err := viaFrame(h, maxFrame)
	if err != nil {
		return nil, fmt.Errorf("hello: %w", err)
	}
	return m.(*protocol.Hello), nil
}

var statuses = map[Result_Status]protocol.Status{
	Result_DONE:      protocol.StatusDone,
	Result_FAILED:    protocol.StatusFailed,
	Result_SNOOZE:    protocol.StatusSnooze,
	Result_CANCELLED: protocol.StatusCancelled,
}

// ToProtocol checks the Execute answer for job id as the result frame it
// stands for.
func (r *Result) ToProtocol(id string, maxFrame int) (*protocol.Result, error) {
	if r.GetId() != id {
		return nil, fmt.Errorf("result: id %q is not the job's id %q", r.GetId(), id)
	}
	st, ok := statuses[r.GetStatus()]
	if !ok {
		return nil, fmt.Errorf("result: invalid status %s", r.GetStatus())
	}
	out := &protocol.Result{ID: id, Status: st}
	switch st {
	case protocol.StatusDone:
		if r.ResultJson != nil {
			out.Result = []byte(r.GetResultJson())
		}
	case protocol.StatusFailed:
		e := r.GetError()
		if e == nil {
			return nil, errors.New("result: a failed result without error")
		}
		out.Error = &protocol.ResultError{Type: e.GetType(), Message: e.GetMessage(), Traceback: e.Traceback,
			Retryable: e.Retryable == nil || *e.Retryable}
		if e.Reason != nil {
			// The frame encoder omits an empty reason: refuse it here, as the stdio decoder does.
			if *e.Reason != string(protocol.ErrorReasonInvalidArguments) {
				return nil, fmt.Errorf("result: error.reason %q is not invalid_arguments", *e.Reason)
			}
			out.Error.Reason = protocol.ErrorReasonInvalidArguments
		}
	case protocol.StatusSnooze:
		out.Seconds, out.Reason = r.GetSeconds(), r.Reason
	}
	m, err := viaFrame(out, maxFrame)
	if err != nil {
		return nil, fmt.Errorf("result: %w", err)
	}
	return m.(*protocol.Result), nil
}

// ToProtocol checks an Enqueue message as the enqueue frame it stands for.
func (e *Enqueue) ToProtocol(maxFrame int) (*protocol.Enqueue, error) {
	out := &protocol.Enqueue{Parent: e.GetParent(), ID: e.GetId(), Name: e.GetName(),
		Args: []byte(e.GetArgsJson()), Queue: e.Queue, Priority: e.Priority, MaxAttempts: e.MaxAttempts,
		Delay: e.DelaySeconds, DedupKey: e.DedupKey, Unique: e.Unique, Immediate: e.Immediate}
	m, err := viaFrame(out, maxFrame)
	if err != nil {
		return nil, fmt.Errorf("enqueue: %w", err)
	}
	return m.(*protocol.Enqueue), nil
}

// FromEnqueued is the Enqueued message of an enqueued frame.
func FromEnqueued(e *protocol.Enqueued) *Enqueued {
	out := &Enqueued{Id: e.ID, JobId: e.JobID}
	if e.Error != nil {
		code, msg := string(e.Error.Code), e.Error.Message
		out.ErrorCode, out.ErrorMessage = &code, &msg
	}
	return out
}
