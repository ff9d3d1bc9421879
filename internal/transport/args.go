package transport

import (
	"errors"

	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// jobUnsendable is the claim check (IsJSONObject, ArgsUnsendable) again,
// applied by the transports to each job frame just before it leaves, so
// that a job that got past the claim check anyway is reported alone
// (Events.Unsendable) instead of breaking the process that would receive
// it.
func jobUnsendable(j *protocol.Job, maxFrame int) error {
	if j.Args == nil {
		return nil // encoded as {}
	}
	if !protocol.IsJSONObject(j.Args) {
		return errors.New("args are not a JSON object")
	}
	if why := protocol.ArgsUnsendable(j.Args, maxFrame); why != "" {
		return errors.New(why)
	}
	return nil
}
