package backends

import "encoding/json"

// Worker rows carry who registered them in metadata, so that a program can
// tell its own predecessor from another program that shares the hostname
// and pid (in a pod every container has the pod's hostname and pid 1).
const (
	// MetaKind names the program that registered a worker row.
	MetaKind = "kind"
	// MetaInstance names the instance of that program (unique per pod).
	MetaInstance = "instance"
)

// IsPredecessor reports whether a worker row with metadata old was
// registered by an earlier run of the same program instance as the one
// whose metadata is cur: both name the same kind and instance, neither
// empty. Only then may a registration take over the row and release its
// jobs; rows of other programs (a Soniq worker, another sidecar instance)
// are never touched.
func IsPredecessor(old, cur json.RawMessage) bool {
	o, ok1 := identity(old)
	c, ok2 := identity(cur)
	return ok1 && ok2 && o == c
}

func identity(meta json.RawMessage) ([2]string, bool) {
	var m map[string]any
	if len(meta) == 0 || json.Unmarshal(meta, &m) != nil {
		return [2]string{}, false
	}
	kind, _ := m[MetaKind].(string)
	inst, _ := m[MetaInstance].(string)
	return [2]string{kind, inst}, kind != "" && inst != ""
}

// WorkerKind returns the program kind a worker row's metadata names, or ""
// (Soniq's own workers name none).
func WorkerKind(meta json.RawMessage) string {
	var m map[string]any
	if len(meta) == 0 || json.Unmarshal(meta, &m) != nil {
		return ""
	}
	kind, _ := m[MetaKind].(string)
	return kind
}
