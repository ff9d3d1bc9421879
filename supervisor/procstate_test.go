package supervisor

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The process life cycle, as docs/architecture.md draws it: forward only,
// dead from anywhere, nothing after dead.
func TestProcessStateTransitions(t *testing.T) {
	all := []procState{procStarting, procReady, procRetiring, procStopping, procDead}
	allowed := map[[2]procState]bool{
		{procStarting, procReady}: true, {procStarting, procStopping}: true, {procStarting, procDead}: true,
		{procReady, procRetiring}: true, {procReady, procStopping}: true, {procReady, procDead}: true,
		{procRetiring, procStopping}: true, {procRetiring, procDead}: true,
		{procStopping, procDead}: true,
	}
	for _, from := range all {
		for _, to := range all {
			assert.Equal(t, allowed[[2]procState{from, to}], from.canBecome(to), "%s → %s", from, to)
		}
	}
}

// The loop is given what it needs (loopHost) and holds no pointer back to
// its Supervisor: everything it shares with other goroutines goes through
// a callback or a channel.
func TestLoopHoldsNoPointerToTheSupervisor(t *testing.T) {
	typ := reflect.TypeFor[loop]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		assert.NotEqual(t, reflect.TypeFor[*Supervisor](), f.Type, "loop.%s", f.Name)
	}
}
