package integration

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Most black-box tests spend their time waiting on real processes and
// timers, each in a database, a directory and processes of its own, so they
// run side by side (t.Parallel). A test that cannot share the machine (it
// bounds a latency other tests' load would stretch, or needs every core)
// says why in a "// Serial:" comment where t.Parallel() would be, so that
// each new test makes that choice on purpose.
func TestEveryTestSaysWhetherItRunsInParallel(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*_test.go")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	fset := token.NewFileSet()
	for _, file := range files {
		f, err := parser.ParseFile(fset, file, nil, parser.ParseComments)
		require.NoError(t, err)
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Body == nil {
				continue
			}
			if firstIsParallel(fn.Body) || hasSerialComment(fset, f, fn.Body) {
				continue
			}
			t.Errorf("%s: %s neither starts with t.Parallel() nor says why it is serial (a \"// Serial: why\" comment at its top)",
				fset.Position(fn.Pos()), fn.Name.Name)
		}
	}
}

func firstIsParallel(body *ast.BlockStmt) bool {
	if len(body.List) == 0 {
		return false
	}
	es, ok := body.List[0].(*ast.ExprStmt)
	if !ok {
		return false
	}
	call, ok := es.X.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	return ok && sel.Sel.Name == "Parallel"
}

// hasSerialComment reports a "// Serial:" comment before the body's first
// statement.
func hasSerialComment(fset *token.FileSet, f *ast.File, body *ast.BlockStmt) bool {
	end := body.Rbrace
	if len(body.List) > 0 {
		end = body.List[0].Pos()
	}
	for _, cg := range f.Comments {
		if cg.Pos() > body.Lbrace && cg.End() <= end && strings.HasPrefix(cg.List[0].Text, "// Serial:") {
			return true
		}
	}
	return false
}
