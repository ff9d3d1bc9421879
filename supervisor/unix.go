package supervisor

import "fmt"

// startUnix starts a handler process speaking gRPC over a Unix socket.
func startUnix(te transportEnv, p *process) error {
	return fmt.Errorf("handler %s: transport unix is not available in this build", p.pool.h.Name)
}
