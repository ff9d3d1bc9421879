package backends

import (
	"encoding/json"
	"time"
)

// Worker rows carry who registered them in metadata, so that a program can
// tell its own predecessor from another program that shares the hostname
// and pid (in a pod every container has the pod's hostname and pid 1), and
// find its predecessor when the pid changed (systemd, Compose, a shared
// process namespace).
const (
	// MetaKind names the program that registered a worker row.
	MetaKind = "kind"
	// MetaInstance names the instance of that program (unique per host).
	MetaInstance = "instance"
	// MetaHost is the host's own name (the row's hostname column may be
	// decorated: "INSTANCE@HOST").
	MetaHost = "hostname"
	// MetaHeartbeatInterval is the program's heartbeat interval in
	// seconds: how often a live row's last_heartbeat moves.
	MetaHeartbeatInterval = "heartbeat_interval"
)

// Identity is who registered a worker row: a program (kind), its instance
// name and the host it runs on. It stays the same across restarts of that
// program instance, whatever its pid; two live rows with one identity are a
// deployment error (two instances given one name on one host).
type Identity struct {
	Kind, Instance, Host string
}

// Valid reports whether every part is set.
func (i Identity) Valid() bool { return i.Kind != "" && i.Instance != "" && i.Host != "" }

// IdentityOf reads the identity a worker row's metadata names; ok is false
// when it names none (Soniq's own workers) or only part of one.
func IdentityOf(meta json.RawMessage) (Identity, bool) {
	m := metaMap(meta)
	kind, _ := m[MetaKind].(string)
	inst, _ := m[MetaInstance].(string)
	host, _ := m[MetaHost].(string)
	id := Identity{Kind: kind, Instance: inst, Host: host}
	return id, id.Valid()
}

// IdentitiesMatch reports whether two worker rows' metadata name the same
// complete identity. (Backend.SameIdentity finds the rows that share a
// worker's identity in the database.)
func IdentitiesMatch(a, b json.RawMessage) bool {
	x, ok1 := IdentityOf(a)
	y, ok2 := IdentityOf(b)
	return ok1 && ok2 && x == y
}

// HeartbeatInterval is the heartbeat interval a worker row's metadata
// declares, or 0 when it declares none.
func HeartbeatInterval(meta json.RawMessage) time.Duration {
	v, _ := metaMap(meta)[MetaHeartbeatInterval].(float64)
	if v <= 0 || v > 3600 {
		return 0
	}
	return time.Duration(v * float64(time.Second))
}

// WorkerKind returns the program kind a worker row's metadata names, or ""
// (Soniq's own workers name none).
func WorkerKind(meta json.RawMessage) string {
	kind, _ := metaMap(meta)[MetaKind].(string)
	return kind
}

func metaMap(meta json.RawMessage) map[string]any {
	var m map[string]any
	if len(meta) == 0 || json.Unmarshal(meta, &m) != nil {
		return nil
	}
	return m
}
