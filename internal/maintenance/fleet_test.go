package supervisor

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSharedQueues(t *testing.T) {
	tests := []struct {
		name         string
		ours, theirs []string
		want         string
	}{
		{"both every queue", nil, nil, "every queue"},
		{"we take every queue", nil, []string{"a", "b"}, "a,b"},
		{"they take every queue", []string{"a"}, nil, "a"},
		{"overlap", []string{"a", "b", "c"}, []string{"c", "a", "x"}, "a,c"},
		{"disjoint", []string{"a"}, []string{"b"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, sharedQueues(tt.ours, tt.theirs))
		})
	}
}
