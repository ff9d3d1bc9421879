package memory

import (
	"encoding/json"
	"fmt"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// child is one of a done completion's children, checked before the lock.
type child struct {
	p    backends.EnqueueParams
	args json.RawMessage
	hash *string
}

// checkChildren checks every child of cs's done completions, by parent id:
// a child the backend cannot write fails the whole batch, as a statement
// would.
func checkChildren(cs []backends.Completion) (map[string][]child, error) {
	var kids map[string][]child
	for _, c := range cs {
		if c.Outcome != backends.OutcomeDone || len(c.Children) == 0 {
			continue
		}
		if kids == nil {
			kids = make(map[string][]child)
		}
		for _, p := range c.Children {
			args, hash, err := enqueueArgs(p)
			if err != nil {
				return nil, fmt.Errorf("complete job %s: child: %w", c.JobID, err)
			}
			kids[c.JobID] = append(kids[c.JobID], child{p: p, args: args, hash: hash})
		}
	}
	return kids, nil
}

// childrenLocked writes the children of a done write whose guard matched;
// a conflict (dedup, unique, a taken id) writes nothing for that child.
func (b *Backend) childrenLocked(kids []child) {
	for _, k := range kids {
		_, _ = b.enqueueLocked(k.p, k.args, k.hash)
	}
}
