package connect

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends/sqlite"
)

func TestRedact(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"user and password", "postgres://soniq:s3cret@db:5432/jobs", "postgres://soniq:xxxxx@db:5432/jobs"},
		{"postgresql scheme", "postgresql://u:p@h/d?sslmode=require", "postgresql://u:xxxxx@h/d?sslmode=require"},
		{"encoded characters", "postgres://u:p%40ss%2Fw@h/d", "postgres://u:xxxxx@h/d"},
		{"unencoded @ in password", "postgres://u:p@ss@h/d", "postgres://u:xxxxx@h/d"},
		{"unencoded / in password", "postgres://u:a/b@h/d", "postgres://u:xxxxx@h/d"},
		{"unencoded ? in password", "postgres://u:a?b@h/d", "postgres://u:xxxxx@h/d"},
		{"empty password", "postgres://u:@h/d", "postgres://u:xxxxx@h/d"},
		{"user only", "postgres://soniq@db/jobs", "postgres://soniq@db/jobs"},
		{"no user info", "postgres://db:5432/jobs", "postgres://db:5432/jobs"},
		{"several hosts", "postgres://u:pw@h1:5432,h2:5432/d", "postgres://u:xxxxx@h1:5432,h2:5432/d"},
		{"password parameter", "postgres://h/d?user=u&password=secret&sslmode=disable",
			"postgres://h/d?user=u&password=xxxxx&sslmode=disable"},
		{"sslpassword parameter", "postgres://h/d?sslpassword=k3y", "postgres://h/d?sslpassword=xxxxx"},
		{"both forms", "postgres://u:a@h/d?PASSWORD=b#frag", "postgres://u:xxxxx@h/d?PASSWORD=xxxxx#frag"},
		{"@ in the query is not user info", "postgres://h/d?application_name=a@b", "postgres://h/d?application_name=a@b"},
		{"password and @ in the query", "postgres://u:pw@h/d?application_name=a@b",
			"postgres://u:xxxxx@h/d?application_name=a@b"},
		{"keyword/value", "host=db user=u password=secret dbname=j", "host=db user=u password=xxxxx dbname=j"},
		{"keyword/value quoted", "host=db password = 'a b\\' c' dbname=j", "host=db password = xxxxx dbname=j"},
		{"sqlite", "sqlite:soniq.db", "sqlite:soniq.db"},
		{"sqlite url", "sqlite:////var/lib/soniq.db", "sqlite:////var/lib/soniq.db"},
		{"empty", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Redact(tc.in))
		})
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want target
	}{
		{"postgres://u:p@h/d", target{kindPostgres, "postgres://u:p@h/d"}},
		{"postgresql://h/d", target{kindPostgres, "postgresql://h/d"}},
		{"POSTGRES://h/d", target{kindPostgres, "POSTGRES://h/d"}},
		{"sqlite:soniq.db", target{kindSQLite, "soniq.db"}},
		{"sqlite:/var/lib/soniq.db", target{kindSQLite, "/var/lib/soniq.db"}},
		{"sqlite:jobs", target{kindSQLite, "jobs"}},
		{"sqlite::memory:", target{kindSQLite, ":memory:"}},
		{"sqlite:///x.db", target{kindSQLite, "x.db"}},
		{"sqlite:////tmp/x.db", target{kindSQLite, "/tmp/x.db"}},
		{"data/jobs.db", target{kindSQLite, "data/jobs.db"}},
		{"/abs/jobs.sqlite3", target{kindSQLite, "/abs/jobs.sqlite3"}},
		{"jobs.sqlite", target{kindSQLite, "jobs.sqlite"}},
		{DefaultURL, target{kindSQLite, "soniq.db"}},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parse(tc.in)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestParseRejects(t *testing.T) {
	for _, in := range []string{
		"", "   ", "mysql://u:hunter2@h/d", "soniq", "sqlite:", "sqlite:///", "sqlite://x.db",
		"memory:", "memory:x", "http://u:hunter2@h/x.db", "redis://h",
	} {
		t.Run(in, func(t *testing.T) {
			_, err := parse(in)
			require.Error(t, err)
			assert.NotContains(t, err.Error(), "hunter2", "password leaked")
			if in != "sqlite:" && in != "sqlite:///" && in != "sqlite://x.db" {
				assert.Contains(t, err.Error(), "postgres://")
				assert.Contains(t, err.Error(), "sqlite:PATH")
				assert.Contains(t, err.Error(), ".sqlite3")
			}
		})
	}
}

func TestOpen(t *testing.T) {
	ctx := t.Context()
	// The in-memory backend is for unit tests only: no URL reaches it.
	_, err := Open(ctx, "memory:")
	require.ErrorIs(t, err, ErrBadURL)

	path := t.TempDir() + "/open.db"
	b, err := Open(ctx, "sqlite:"+path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	assert.IsType(t, &sqlite.Backend{}, b)
	require.NoError(t, b.Migrate(ctx))
	require.NoError(t, b.Ping(ctx))

	_, err = Open(ctx, "ftp://u:hunter2@h")
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "hunter2")
}

func TestOpenWithRejectsBadPoolerOptions(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"unknown pooler", Options{Pooler: "statement"}, `unknown pooler mode "statement"`},
		{"listen url not postgres", Options{Pooler: "transaction", ListenURL: "sqlite:x.db"}, "listen URL"},
		{"listen url password redacted", Options{ListenURL: "mysql://u:s3cret@h/db"}, "xxxxx"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := OpenWith(t.Context(), "postgres://u@127.0.0.1:1/db", tc.opts)
			if b != nil {
				_ = b.Close()
			}
			if !errors.Is(err, ErrBadURL) {
				t.Fatalf("OpenWith(%+v) = %v, want ErrBadURL", tc.opts, err)
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error %q: want it to contain %q and no password", err, tc.want)
			}
		})
	}
}
