package integration

// The sidecar container of a pod restarted while its attached handler
// keeps working: exactly once across the restart. The handler is a real SDK
// process serving its socket; the sidecar is the real binary, killed with
// SIGKILL and started again, either as a container runtime runs it (pid 1
// in a pid namespace of its own, on the pod's hostname: a UTS namespace;
// see podNamespaces) or as systemd, Compose or a pod sharing its process
// namespace does (another pid on the same hostname).

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// restartTopology is how the sidecar container comes back.
type restartTopology struct {
	name string
	pod  bool // pid 1 in its own pid namespace, on the pod's hostname
}

var restartTopologies = []restartTopology{
	{name: "pid 1 in a pid namespace", pod: true},
	{name: "another pid", pod: false},
}

// podInstance is the instance name the restart tests give their sidecars:
// a restart keeps it, as a container keeps its environment.
const podInstance = "billing"

// sidecarAs starts this pod's sidecar (instance billing) on host: as pid 1
// in namespaces of its own when topo.pod, else as a plain process.
func (p *pod) sidecarAs(topo restartTopology, host string, env map[string]string) *sidecar {
	p.t.Helper()
	e := map[string]string{"SONIQ_INSTANCE": podInstance}
	for k, v := range env {
		e[k] = v
	}
	o := sidecarOpts{env: e, args: []string{"--manifest", p.manifest}}
	if topo.pod {
		o.podHost = host
	}
	return p.launchSidecar(o)
}

// kill SIGKILLs the sidecar and waits until it is gone.
func (s *sidecar) kill(t *testing.T) {
	t.Helper()
	s.signal(syscall.SIGKILL)
	s.wait(10 * time.Second)
}

// sibling is another handler container of the same world (the same
// database and record files): its own socket directory and manifest.
func (p *pod) sibling(t *testing.T, name string, o manifestOpts) *pod {
	t.Helper()
	dir, err := os.MkdirTemp("", "soniq-pod-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	q := &pod{world: p.world, sock: filepath.Join(dir, "handler.sock"), env: map[string]string{}}
	for k, v := range p.env {
		q.env[k] = v
	}
	q.cred = q.handlerUser(t, dir)
	q.writeManifest(t, filepath.Join(p.dir, name+".yaml"), o)
	return q
}

// waitEnded waits until the handler recorded the end of job id.
func (w *world) waitEnded(t *testing.T, id string) {
	t.Helper()
	eventually(t, 20*time.Second, "job "+id+" ended in the handler", func() bool { return w.eventIndex("end", id) >= 0 })
}

func TestAttachPodSidecarRestart(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		opts manifestOpts
		run  func(t *testing.T, p *pod, h *podHandler, topo restartTopology)
	}{
		{
			// The job still runs when the new sidecar attaches; concurrency
			// 1, so its only slot is the running job's.
			name: "running job, concurrency 1",
			opts: manifestOpts{concurrency: 1, syncConcurrency: 1},
			run: func(t *testing.T, p *pod, h *podHandler, topo restartTopology) {
				first := p.sidecarAs(topo, "pod-a", nil)
				attachedTo(t, first)
				a := p.enqueue("t.sleep_sync", `{"seconds":8}`, 0)
				p.waitStarted(t, a)
				first.kill(t)
				second := p.sidecarAs(topo, "pod-a", nil)
				attachedTo(t, second)
				secondID := second.workerID(t)
				var j backends.Job
				eventually(t, 10*time.Second, "the running job's row held by the new sidecar", func() bool {
					j = p.job(a)
					return j.WorkerID != nil && *j.WorkerID == secondID
				})
				require.Equal(t, 0, p.eventIndex("end", a)+1, "the job still runs")
				assert.Equal(t, backends.StatusProcessing, j.Status, "kept, not given back to the queue")
				assert.Equal(t, 1, j.Attempts, "attempts unchanged")
				b := p.enqueue("t.record", `{}`, 0)
				p.waitDone(t, second, 30*time.Second, a, b)
				assert.Equal(t, 1, p.started(a), "the sync job ran once")
				assert.Equal(t, 1, p.job(a).Attempts)
				assert.JSONEq(t, `{"slept": 8}`, string(p.job(a).Result))
				assert.Greater(t, p.eventIndex("run", b), p.eventIndex("end", a),
					"the new job waited for the running job's slot (concurrency 1)")
				assert.Empty(t, second.logs("result for a job this process does not hold"))
				adopted := second.waitLog(time.Second, "the predecessor's job is reported by the attached handler", map[string]any{"job_id": a})
				assert.Equal(t, "running", adopted["state"])
				second.stop(t)
				require.True(t, h.running(), "the handler outlives both sidecars")
			},
		},
		{
			// The job ends while no sidecar runs: the handler keeps its
			// result for the next session.
			name: "job finished while no sidecar runs",
			run: func(t *testing.T, p *pod, h *podHandler, topo restartTopology) {
				first := p.sidecarAs(topo, "pod-a", nil)
				attachedTo(t, first)
				a := p.enqueue("t.sleep_sync", `{"seconds":1}`, 0)
				p.waitStarted(t, a)
				first.kill(t)
				p.waitEnded(t, a)
				second := p.sidecarAs(topo, "pod-a", nil)
				p.waitDone(t, second, 30*time.Second, a)
				j := p.job(a)
				assert.Equal(t, 1, p.started(a), "ran once")
				assert.Equal(t, 1, j.Attempts)
				assert.JSONEq(t, `{"slept": 1}`, string(j.Result), "the kept result is the row's result")
				kept := second.waitLog(5*time.Second, "the predecessor's job is reported by the attached handler", map[string]any{"job_id": a})
				assert.Equal(t, "finished; its kept result follows", kept["state"])
				h.waitStderr(5*time.Second, "job "+a+" ended with no session open")
				second.stop(t)
			},
		},
		{
			// The sidecar stops reading (SIGSTOP: a frozen container), the
			// job ends and the handler writes its result on the session,
			// then the sidecar is killed: the result was sent on a session
			// that broke before it was recorded.
			name: "result sent as the session breaks",
			run: func(t *testing.T, p *pod, h *podHandler, topo restartTopology) {
				first := p.sidecarAs(topo, "pod-a", nil)
				attachedTo(t, first)
				a := p.enqueue("t.sleep_sync", `{"seconds":1}`, 0)
				p.waitStarted(t, a)
				first.signal(syscall.SIGSTOP)
				p.waitEnded(t, a)
				time.Sleep(500 * time.Millisecond) // the result is written to the stream
				first.kill(t)
				second := p.sidecarAs(topo, "pod-a", nil)
				p.waitDone(t, second, 30*time.Second, a)
				j := p.job(a)
				assert.Equal(t, 1, p.started(a), "ran once")
				assert.Equal(t, 1, j.Attempts)
				assert.JSONEq(t, `{"slept": 1}`, string(j.Result))
				h.waitStderr(5*time.Second, "job "+a+" had its result")
				for _, line := range h.stderr() {
					assert.NotContains(t, line, "job "+a+" ended with no session open", "the result was sent on the session")
				}
				second.stop(t)
			},
		},
		{
			// The handler container dies with the sidecar (the whole pod
			// restarts): no endpoint reports the job, so the new sidecar
			// gives its row back at once, attempts unchanged, instead of
			// leaving it to stale-worker recovery (heartbeat_timeout, 30 s
			// here), and it runs again.
			name: "handler killed too",
			run: func(t *testing.T, p *pod, h *podHandler, topo restartTopology) {
				first := p.sidecarAs(topo, "pod-a", nil)
				attachedTo(t, first)
				trigger := filepath.Join(p.dir, "trigger")
				a := p.enqueue("t.sleep_async", `{"seconds":60,"trigger":"`+trigger+`"}`, 0)
				p.waitStarted(t, a)
				first.kill(t)
				h.signal(syscall.SIGKILL)
				h.wait(10 * time.Second)
				require.NoError(t, os.WriteFile(trigger, nil, 0o644)) // the next run ends at once
				p.startHandler(t)
				restarted := time.Now()
				second := p.sidecarAs(topo, "pod-a", nil)
				p.waitDone(t, second, 30*time.Second, a)
				took := time.Since(restarted)
				t.Logf("%s: the job ran again %.1fs after the restart", topo.name, took.Seconds())
				assert.Less(t, took, 15*time.Second, "not left to stale-worker recovery")
				assert.Equal(t, 2, p.started(a), "the killed run and the run after the restart")
				assert.Equal(t, 2, p.job(a).Attempts, "given back with attempts unchanged; the new claim counts one")
				back := second.waitLog(time.Second, "gave back the predecessor's jobs no attached handler reports", nil)
				assert.Contains(t, back["job_ids"], a)
				second.stop(t)
			},
		},
	}
	forEachPodSDK(t, func(t *testing.T, s sdk) {
		for _, topo := range restartTopologies {
			for _, c := range cases {
				t.Run(topo.name+"/"+c.name, func(t *testing.T) {
					t.Parallel()
					p := newPod(t, s, c.opts)
					h := p.startHandler(t)
					c.run(t, p, h, topo)
				})
			}
		}
	})
}

// Two pods serve one queue. Pod A's sidecar is killed while its handler
// runs a sync job; pod B's sidecar polls the queue meanwhile. When A's
// sidecar comes back (pid 1 again, same hostname) the row is kept for the
// running execution: B never gets it, the job runs once.
func TestAttachPodTwoPodsOneQueue(t *testing.T) {
	t.Parallel()
	forEachPodSDK(t, func(t *testing.T, s sdk) {
		pod := restartTopologies[0]
		a := newPod(t, s, manifestOpts{})
		b := a.sibling(t, "pod-b", manifestOpts{})
		a.startHandler(t)
		b.startHandler(t)
		first := a.sidecarAs(pod, "pod-a", nil)
		attachedTo(t, first)
		job := a.enqueue("t.sleep_sync", `{"seconds":4}`, 0)
		a.waitStarted(t, job)
		other := b.sidecarAs(pod, "pod-b", nil)
		attachedTo(t, other)
		first.kill(t)
		time.Sleep(time.Second) // pod B polls the queue (every 0.2 s)
		second := a.sidecarAs(pod, "pod-a", nil)
		a.waitDone(t, second, 30*time.Second, job)
		assert.Equal(t, 1, a.started(job), "one execution: pod B never ran it")
		assert.Equal(t, 1, a.job(job).Attempts)
		assert.Empty(t, other.logs("claimed job is still running"))
		// Both pods keep serving the queue.
		more := a.enqueueN("t.record", `{}`, 6)
		a.waitDone(t, second, 30*time.Second, more...)
		for _, id := range more {
			assert.Equal(t, 1, a.started(id), id)
		}
		second.stop(t)
		other.stop(t)
	})
}

// Two live sidecars in one pod (same hostname, both pid 1) given one
// instance name, each attached to a handler container of its own: a
// deployment error. The second says so (ERROR naming the instance) and
// takes nothing over; neither loses its worker row; every job runs once.
func TestAttachPodTwoLiveSidecarsOneInstance(t *testing.T) {
	t.Parallel()
	forEachPodSDK(t, func(t *testing.T, s sdk) {
		pod := restartTopologies[0]
		one := newPod(t, s, manifestOpts{})
		two := one.sibling(t, "two", manifestOpts{})
		one.startHandler(t)
		two.startHandler(t)
		first := one.sidecarAs(pod, "pod-x", nil)
		attachedTo(t, first)
		firstID := first.workerID(t)
		second := two.sidecarAs(pod, "pod-x", nil)
		attachedTo(t, second)
		secondID := second.workerID(t)

		ids := one.enqueueN("t.sleep_sync", `{"seconds":0.5}`, 8)
		whileRunning(t, 60*time.Second, "8 jobs done or dead-lettered", func() bool {
			st := one.stats()
			return st.Done+st.DeadLetter == 8
		}, first, second)
		assert.Zero(t, one.stats().DeadLetter)
		for _, id := range ids {
			assert.Equal(t, 1, one.started(id), "job %s ran once", id)
		}
		clash := second.waitLog(time.Second, "another live sidecar on this host has this instance name", map[string]any{"level": "ERROR"})
		assert.Equal(t, podInstance, clash["instance"])
		assert.Equal(t, firstID, clash["other_worker_id"])
		for _, sc := range []*sidecar{first, second} {
			assert.Empty(t, sc.logs("worker row was lost"), "neither takes the other's row")
		}
		assert.Empty(t, first.logs("another live sidecar"), "the first one was there first")
		rows := one.workers(t)
		host := "pod-x"
		assert.Equal(t, workerRow{podInstance + "@" + host, 1, backends.WorkerActive}, rows[firstID])
		assert.Equal(t, workerRow{podInstance + "@" + host + "#" + secondID[:8], 1, backends.WorkerActive}, rows[secondID],
			"the second registered beside it, under a hostname made unique by its id")
		first.stop(t)
		second.stop(t)
	})
}
