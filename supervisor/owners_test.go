package supervisor

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// fieldOwners names, for each field group of the loop's state, the one
// file whose code may write it. A write is an assignment, an increment, a
// delete or a clear whose target goes through the field; building a
// struct literal is not one. The first owned name met from the root of the
// target decides (l.shut.timer belongs to shut, t.timer to binding).
var fieldOwners = map[string]string{
	"live": "bind.go", "tasks": "bind.go", "syncHeld": "bind.go", "timer": "bind.go", "kids": "bind.go",
	"claim": "claim.go", "pending": "dispatch.go", "dispatch": "dispatch.go",
	"ahead": "reserve.go",
	"limit": "limits.go", "overrides": "limits.go",
	"shut":      "shutdown.go",
	"rereg":     "identity.go",
	"inherited": "inherit.go",
	"restart":   "lifecycle.go", "ping": "lifecycle.go", "procs": "lifecycle.go", "fatal": "lifecycle.go",
	"attach": "attach.go",
	"ack":    "acks.go", "ackWait": "acks.go",
	"isolated": "suspect.go",
	"audit":    "audit.go",
	"cancels":  "cancel.go",
}

// Each field group of the loop's state has one writer: the file of its
// concern. A new write elsewhere goes through a method of that file.
func TestFieldGroupsHaveOneWriter(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		check := func(target ast.Expr) {
			group := ownedGroup(target)
			if group == "" {
				return
			}
			checked++
			if owner := fieldOwners[group]; owner != name {
				t.Errorf("%s: writes %s, which only %s may write", fset.Position(target.Pos()), group, owner)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.AssignStmt:
				if n.Tok == token.DEFINE {
					return true
				}
				for _, lhs := range n.Lhs {
					check(lhs)
				}
			case *ast.IncDecStmt:
				check(n.X)
			case *ast.CallExpr:
				if id, ok := n.Fun.(*ast.Ident); ok && (id.Name == "delete" || id.Name == "clear") && len(n.Args) > 0 {
					check(n.Args[0])
				}
			}
			return true
		})
	}
	if checked < 40 {
		t.Fatalf("only %d writes of owned fields found: the check no longer sees them", checked)
	}
}

// ownedGroup is the first owned field name on the way from a write's root
// to its target ("" when none is): for l.shut.timer, "shut".
func ownedGroup(e ast.Expr) string {
	var names []string
	for {
		switch x := e.(type) {
		case *ast.SelectorExpr:
			names = append(names, x.Sel.Name)
			e = x.X
			continue
		case *ast.IndexExpr:
			e = x.X
			continue
		case *ast.StarExpr:
			e = x.X
			continue
		case *ast.ParenExpr:
			e = x.X
			continue
		}
		break
	}
	for i := len(names) - 1; i >= 0; i-- {
		if _, ok := fieldOwners[names[i]]; ok {
			return names[i]
		}
	}
	return ""
}
