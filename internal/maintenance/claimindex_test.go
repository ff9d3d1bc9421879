package maintenance

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
)

// indexer answers HasClaimIndex from a script, one answer per check.
type indexer struct {
	mu      sync.Mutex
	answers []error // nil: present; errMissing: missing; other: the read failed
}

var errMissing = errors.New("missing")

func (ix *indexer) HasClaimIndex(context.Context) (bool, error) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	a := ix.answers[0]
	if len(ix.answers) > 1 {
		ix.answers = ix.answers[1:]
	}
	switch a {
	case nil:
		return true, nil
	case errMissing:
		return false, nil
	}
	return false, a
}

func (ix *indexer) CreateClaimIndex(context.Context) error { return nil }

// A missing index is reported at every check and warned of once; its
// arrival is logged; a failed read changes nothing.
func TestClaimIndexWatcher(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ix := &indexer{answers: []error{errMissing, errMissing, errors.New("connection refused"), nil, nil}}
		var logs recorder
		var missing []bool
		w := NewClaimIndexWatcher(ix, logs.logger(), func(m bool) { missing = append(missing, m) })
		w.Start(t.Context())
		synctest.Wait()
		for range 4 {
			time.Sleep(claimIndexCheckEvery)
			synctest.Wait()
		}
		w.Stop()
		assert.Equal(t, []bool{true, true, false, false}, missing)
		msgs := logs.messages()
		assert.Len(t, msgs, 2)
		assert.Contains(t, msgs[0], "the claim-order index is missing")
		assert.Equal(t, "the claim-order index is present now", msgs[1])
	})
}
