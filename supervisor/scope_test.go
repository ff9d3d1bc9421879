package supervisor

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The scope is the package's import path, and the operator's docs give it:
// a dashboard keyed on the documented name sees the sidecar's metrics.
func TestInstrumentationScopeIsThePackagePathAndDocumented(t *testing.T) {
	assert.Equal(t, reflect.TypeFor[Supervisor]().PkgPath(), InstrumentationScope)
	doc, err := os.ReadFile("../docs/operations.md")
	require.NoError(t, err)
	assert.True(t, strings.Contains(string(doc), "`"+InstrumentationScope+"`"),
		"docs/operations.md names the instrumentation scope %s", InstrumentationScope)
}
