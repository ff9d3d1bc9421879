package integration

// The overlay that lets `podman kube play` run deploy/kubernetes/attach.yaml and
// deployment.yaml unchanged on disk (pod_test.go, make test-pod). It is applied in memory to
// the files users apply, never to a copy of them, and changes only what a single machine
// without a cluster needs changed, each for a stated reason:
//
//   - images: the placeholders and published names become the images `make images` built
//     (every image must be mapped: an unknown one is an error, not a pull);
//   - the database Secret (secretKeyRef soniq-database/url) becomes the test database's URL;
//   - replicas become 1: podman starts every replica as a pod of its own on the same host;
//   - containers' `ports` are dropped: podman would publish each containerPort on the host
//     (two pods, or anything else on 9464, would collide); the probes and the test reach the
//     pod's own address, as the kubelet and Prometheus do;
//   - a native sidecar (an init container with restartPolicy Always) moves to `containers`,
//     as the file itself says to do for clusters older than 1.29: podman (4.x) runs init
//     containers to completion, one after the other;
//   - the pod's restartPolicy becomes OnFailure: podman gives init containers the pod's
//     policy, and Always runs `migrate` forever; a killed container (137) is still restarted;
//   - fsGroup is emulated as the kubelet applies it, which podman does not: the group is added
//     to every container (supplementalGroups) and each emptyDir becomes a tmpfs volume owned by
//     root:fsGroup, mode 2777 (setgid), made beforehand (volume func);
//   - named commands, environment values and the manifest's jobs are replaced where the test
//     says (the example handlers stand in for the application's), and only where the file has
//     them: replacing something that is not there is an error, so the overlay cannot drift
//     from the files silently.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// podOverlay is what podOverlay.apply changes in a deploy/kubernetes file.
type podOverlay struct {
	// images maps an image name without its tag (ghcr.io/soniq-dev/soniq-sidecar) to the
	// local image that replaces it.
	images map[string]string
	// databaseURL replaces every secretKeyRef to the soniq-database Secret.
	databaseURL string
	// suffix is appended to the names of the Deployment (the pods' names and hostnames) and
	// of the ConfigMaps (and the volumes naming them), so that runs on one machine do not
	// collide: podman keeps a ConfigMap as a named volume of the host, shared by every pod
	// that names it, whatever file it came from.
	suffix string
	// commands replaces the command of the named containers.
	commands map[string][]string
	// probeCommands replaces, in the exec probes of the named containers, the program: the
	// arguments up to and including "probe" (python -m soniq_handler probe), keeping the
	// socket and options after it; another SDK's worker has another probe program.
	probeCommands map[string][]string
	// env replaces environment values of the named containers (container → name → value).
	env map[string]map[string]string
	// jobs replaces the jobs of every handler of the manifests in ConfigMaps.
	jobs []any
	// volume makes the volume that stands in for an emptyDir with the given fsGroup and
	// returns its name.
	volume func(emptyDir string, fsGroup int) (string, error)
}

// overlaid is a deploy/kubernetes file after the overlay.
type overlaid struct {
	yaml       []byte
	podSpec    map[string]any // the Deployment's pod template spec: containers, probes
	deployment string         // the Deployment's name (podman names the pod NAME-pod-0)
	configMaps []string       // the ConfigMaps' names (podman's volumes of those names)
}

// apply returns the overlaid src (one or more YAML documents). The probes stay as they are,
// but for a named port, replaced by its number (the ports themselves are dropped).
func (o podOverlay) apply(src []byte) (overlaid, error) {
	var res overlaid
	ys, ps, name, err := o.applyDocs(src)
	if err != nil {
		return res, err
	}
	res = overlaid{yaml: ys, podSpec: ps, deployment: name}
	for _, v := range list(ps["volumes"]) {
		if cm, _ := v.(map[string]any)["configMap"].(map[string]any); cm != nil {
			res.configMaps = append(res.configMaps, fmt.Sprint(cm["name"]))
		}
	}
	return res, nil
}

func (o podOverlay) applyDocs(src []byte) ([]byte, map[string]any, string, error) {
	var docs []map[string]any
	dec := yaml.NewDecoder(bytes.NewReader(src))
	for {
		var d map[string]any
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, "", fmt.Errorf("parsing: %w", err)
		}
		if d != nil {
			docs = append(docs, d)
		}
	}
	var podSpec map[string]any
	var deployment string
	usedCommands, usedEnv := map[string]bool{}, map[string]bool{}
	for _, d := range docs {
		switch d["kind"] {
		case "ConfigMap":
			if err := o.configMap(d); err != nil {
				return nil, nil, "", err
			}
			meta, _ := d["metadata"].(map[string]any)
			if meta["name"] == nil {
				return nil, nil, "", errors.New("a ConfigMap has no metadata.name")
			}
			meta["name"] = fmt.Sprint(meta["name"]) + o.suffix
		case "Deployment":
			if podSpec != nil {
				return nil, nil, "", errors.New("more than one Deployment")
			}
			meta, _ := d["metadata"].(map[string]any)
			name, _ := meta["name"].(string)
			if name == "" {
				return nil, nil, "", errors.New("the Deployment has no metadata.name")
			}
			deployment = name + o.suffix
			meta["name"] = deployment
			spec, _ := d["spec"].(map[string]any)
			tmpl, _ := spec["template"].(map[string]any)
			ps, _ := tmpl["spec"].(map[string]any)
			if ps == nil {
				return nil, nil, "", errors.New("the Deployment has no spec.template.spec")
			}
			spec["replicas"] = 1
			if err := o.podSpec(ps, usedCommands, usedEnv); err != nil {
				return nil, nil, "", fmt.Errorf("Deployment %s: %w", name, err)
			}
			podSpec = ps
		default:
			return nil, nil, "", fmt.Errorf("kind %v: the overlay knows ConfigMap and Deployment only", d["kind"])
		}
	}
	if podSpec == nil {
		return nil, nil, "", errors.New("no Deployment")
	}
	for c := range o.commands {
		if !usedCommands[c] {
			return nil, nil, "", fmt.Errorf("a command for container %q, which the file does not have", c)
		}
	}
	for c := range o.probeCommands {
		if !usedCommands[c+"/probe"] {
			return nil, nil, "", fmt.Errorf("a probe command for container %q, which the file does not have", c)
		}
	}
	for c, vars := range o.env {
		for k := range vars {
			if !usedEnv[c+"/"+k] {
				return nil, nil, "", fmt.Errorf("a value for %s of container %q, which the file does not set", k, c)
			}
		}
	}
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	for _, d := range docs {
		if err := enc.Encode(d); err != nil {
			return nil, nil, "", err
		}
	}
	if err := enc.Close(); err != nil {
		return nil, nil, "", err
	}
	return out.Bytes(), podSpec, deployment, nil
}

func (o podOverlay) configMap(d map[string]any) error {
	data, _ := d["data"].(map[string]any)
	for key, v := range data {
		text, _ := v.(string)
		var m map[string]any
		if yaml.Unmarshal([]byte(text), &m) != nil || m["handlers"] == nil {
			continue // not a manifest
		}
		if o.jobs == nil {
			continue
		}
		handlers, _ := m["handlers"].([]any)
		for _, h := range handlers {
			hm, _ := h.(map[string]any)
			if hm == nil || hm["jobs"] == nil {
				return fmt.Errorf("ConfigMap %s: a handler without jobs", key)
			}
			hm["jobs"] = o.jobs
		}
		b, err := yaml.Marshal(m)
		if err != nil {
			return err
		}
		data[key] = string(b)
	}
	return nil
}

func (o podOverlay) podSpec(ps map[string]any, usedCommands, usedEnv map[string]bool) error {
	inits := list(ps["initContainers"])
	var keep []any
	moved := list(nil)
	for _, c := range inits {
		if cm, _ := c.(map[string]any); cm != nil && cm["restartPolicy"] == "Always" {
			delete(cm, "restartPolicy")
			moved = append(moved, cm)
			continue
		}
		keep = append(keep, c)
	}
	if len(keep) > 0 {
		ps["initContainers"] = keep
	} else {
		delete(ps, "initContainers")
	}
	ps["containers"] = append(moved, list(ps["containers"])...)
	ps["restartPolicy"] = "OnFailure"

	sc, _ := ps["securityContext"].(map[string]any)
	fsGroup := 0
	if g, ok := sc["fsGroup"].(int); ok {
		fsGroup = g
		sc["supplementalGroups"] = append(list(sc["supplementalGroups"]), g)
	}
	for _, v := range list(ps["volumes"]) {
		vm, _ := v.(map[string]any)
		if cm, _ := vm["configMap"].(map[string]any); cm != nil {
			cm["name"] = fmt.Sprint(cm["name"]) + o.suffix
		}
		if _, ok := vm["emptyDir"]; !ok {
			continue
		}
		if o.volume == nil {
			return fmt.Errorf("volume %v: an emptyDir and no volume maker", vm["name"])
		}
		name, err := o.volume(fmt.Sprint(vm["name"]), fsGroup)
		if err != nil {
			return fmt.Errorf("volume %v: %w", vm["name"], err)
		}
		delete(vm, "emptyDir")
		vm["persistentVolumeClaim"] = map[string]any{"claimName": name}
	}

	for _, c := range append(list(ps["initContainers"]), list(ps["containers"])...) {
		cm, _ := c.(map[string]any)
		name, _ := cm["name"].(string)
		image, _ := cm["image"].(string)
		repo := image
		if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
			repo = image[:i]
		}
		local, ok := o.images[repo]
		if !ok {
			return fmt.Errorf("container %s: no local image for %q", name, image)
		}
		cm["image"] = local
		ports := map[string]any{}
		for _, p := range list(cm["ports"]) {
			pm, _ := p.(map[string]any)
			if n, ok := pm["name"].(string); ok {
				ports[n] = pm["containerPort"]
			}
		}
		delete(cm, "ports")
		for _, kind := range []string{"startupProbe", "livenessProbe", "readinessProbe"} {
			pr, _ := cm[kind].(map[string]any)
			h, _ := pr["httpGet"].(map[string]any)
			if named, ok := h["port"].(string); ok {
				if ports[named] == nil {
					return fmt.Errorf("container %s: %s names port %q, which the container does not declare", name, kind, named)
				}
				h["port"] = ports[named]
			}
		}
		if cmd, ok := o.commands[name]; ok {
			if cm["command"] == nil {
				return fmt.Errorf("container %s has no command to replace", name)
			}
			cm["command"] = cmd
			usedCommands[name] = true
		}
		if prog, ok := o.probeCommands[name]; ok {
			replaced := 0
			for _, kind := range []string{"startupProbe", "livenessProbe", "readinessProbe"} {
				pr, _ := cm[kind].(map[string]any)
				ex, _ := pr["exec"].(map[string]any)
				argv := list(ex["command"])
				i := slices.Index(argv, any("probe"))
				if i < 0 {
					continue
				}
				ex["command"] = append(slices.Clone(toAny(prog)), argv[i+1:]...)
				replaced++
			}
			if replaced == 0 {
				return fmt.Errorf("container %s has no exec probe running \"probe\" to replace", name)
			}
			usedCommands[name+"/probe"] = true
		}
		for _, e := range list(cm["env"]) {
			em, _ := e.(map[string]any)
			k, _ := em["name"].(string)
			if v, ok := o.env[name][k]; ok {
				em["value"] = v
				delete(em, "valueFrom")
				usedEnv[name+"/"+k] = true
				continue
			}
			if vf, _ := em["valueFrom"].(map[string]any); vf != nil {
				ref, _ := vf["secretKeyRef"].(map[string]any)
				if ref == nil || ref["name"] != "soniq-database" || ref["key"] != "url" {
					return fmt.Errorf("container %s: %s comes from %v, which the overlay does not provide", name, k, vf)
				}
				if o.databaseURL == "" {
					return fmt.Errorf("container %s: %s needs the database URL", name, k)
				}
				delete(em, "valueFrom")
				em["value"] = o.databaseURL
			}
		}
	}
	return nil
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

func list(v any) []any {
	l, _ := v.([]any)
	return l
}

// exampleJobs are the jobs the example handlers of sdk (python, node) serve, as their
// manifest lists them.
func exampleJobs(t testing.TB, sdk string) []any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "examples", sdk, "manifest-unix.yaml"))
	require.NoError(t, err)
	var m struct {
		Handlers []struct {
			Jobs []any `yaml:"jobs"`
		} `yaml:"handlers"`
	}
	require.NoError(t, yaml.Unmarshal(b, &m))
	require.NotEmpty(t, m.Handlers)
	return m.Handlers[0].Jobs
}

// The overlay on the real files, without an engine (the engine runs it in pod_test.go).
func TestPodOverlayOnTheDeployFiles(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	volumes := map[string]int{}
	o := podOverlay{
		images: map[string]string{
			"ghcr.io/soniq-dev/soniq-sidecar": "localhost/soniq-sidecar:dev",
			"registry.example.com/billing":    "localhost/soniq-python-examples:dev",
			"registry.example.com/myapp":      "localhost/soniq-python-app:dev",
		},
		databaseURL: "postgres://u@10.0.0.1:5432/db",
		suffix:      "-x",
		jobs:        exampleJobs(t, "python"),
		volume: func(name string, g int) (string, error) {
			volumes[name] = g
			return "vol-" + name, nil
		},
	}
	t.Run("attach", func(t *testing.T) {
		src, err := os.ReadFile(filepath.Join(root, "deploy/kubernetes/attach.yaml"))
		require.NoError(t, err)
		o := o
		o.commands = map[string][]string{"worker": {"python", "-m", "soniq_handler_examples", "--listen", "/run/soniq/billing.sock"}}
		o.env = map[string]map[string]string{"soniq-sidecar": {"SONIQ_SHUTDOWN_TIMEOUT": "4"}}
		res, err := o.apply(src)
		require.NoError(t, err)
		s, ps := string(res.yaml), res.podSpec
		assert.NotContains(t, s, "registry.example.com")
		assert.NotContains(t, s, "ghcr.io")
		assert.NotContains(t, s, "secretKeyRef")
		assert.NotContains(t, s, "emptyDir")
		assert.Equal(t, "billing-worker-x", res.deployment)
		assert.Equal(t, []string{"billing-soniq-manifest-x"}, res.configMaps)
		assert.Contains(t, s, "name: billing-soniq-manifest-x\n")
		assert.Contains(t, s, "examples.sleep_sync")
		assert.NotContains(t, s, "billing.charge")
		assert.Equal(t, map[string]int{"soniq-socket": 2000}, volumes)
		var names []string
		for _, c := range list(ps["containers"]) {
			names = append(names, c.(map[string]any)["name"].(string))
			assert.Nil(t, c.(map[string]any)["ports"])
		}
		assert.Equal(t, []string{"worker", "soniq-sidecar"}, names, "the native sidecar moves to containers")
		assert.Len(t, list(ps["initContainers"]), 1)
		assert.Equal(t, "OnFailure", ps["restartPolicy"])
		assert.Equal(t, []any{2000}, ps["securityContext"].(map[string]any)["supplementalGroups"])
		// The probes are the file's.
		side := list(ps["containers"])[1].(map[string]any)
		assert.Equal(t, map[string]any{"path": "/readyz", "port": 9464}, side["readinessProbe"].(map[string]any)["httpGet"],
			"a named port becomes its number")

		o.probeCommands = map[string][]string{"worker": {"node", "probe.js"}}
		res, err = o.apply(src)
		require.NoError(t, err)
		worker := list(res.podSpec["containers"])[0].(map[string]any)
		assert.Equal(t, []any{"node", "probe.js", "/run/soniq/billing.sock", "--timeout", "5"},
			worker["livenessProbe"].(map[string]any)["exec"].(map[string]any)["command"])
	})
	t.Run("deployment", func(t *testing.T) {
		src, err := os.ReadFile(filepath.Join(root, "deploy/kubernetes/deployment.yaml"))
		require.NoError(t, err)
		o := o
		o.commands = map[string][]string{"app": {"python", "-m", "http.server"}}
		res, err := o.apply(src)
		require.NoError(t, err)
		assert.NotContains(t, string(res.yaml), "gunicorn")
		assert.Contains(t, string(res.yaml), "localhost/soniq-python-app:dev")
	})
	t.Run("bad input", func(t *testing.T) {
		src, err := os.ReadFile(filepath.Join(root, "deploy/kubernetes/attach.yaml"))
		require.NoError(t, err)
		for _, c := range []struct {
			name string
			edit func(o *podOverlay)
			want string
		}{
			{"unmapped image", func(o *podOverlay) { o.images = map[string]string{"ghcr.io/soniq-dev/soniq-sidecar": "x"} }, `no local image for "registry.example.com/billing:1.0.0"`},
			{"command of a missing container", func(o *podOverlay) { o.commands = map[string][]string{"nope": {"true"}} }, `container "nope", which the file does not have`},
			{"env the file does not set", func(o *podOverlay) {
				o.env = map[string]map[string]string{"soniq-sidecar": {"SONIQ_NOPE": "1"}}
			}, "SONIQ_NOPE of container \"soniq-sidecar\", which the file does not set"},
			{"no database URL", func(o *podOverlay) { o.databaseURL = "" }, "needs the database URL"},
			{"probe command of a container without one", func(o *podOverlay) {
				o.probeCommands = map[string][]string{"soniq-sidecar": {"node", "probe.js"}}
			}, `container soniq-sidecar has no exec probe running "probe"`},
		} {
			o := o
			c.edit(&o)
			_, err := o.apply(src)
			require.Error(t, err, c.name)
			assert.Contains(t, err.Error(), c.want, c.name)
		}
		_, err = o.apply([]byte("kind: Service\n"))
		assert.ErrorContains(t, err, "kind Service")
		_, err = o.apply([]byte("kind: ConfigMap\nmetadata: {name: m}\n"))
		assert.ErrorContains(t, err, "no Deployment")
		bad := strings.Replace(string(src), "port: metrics}", "port: metricz}", 1)
		require.NotEqual(t, string(src), bad)
		_, err = o.apply([]byte(bad))
		assert.ErrorContains(t, err, `names port "metricz", which the container does not declare`)
	})
}
