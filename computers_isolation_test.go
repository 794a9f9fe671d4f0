package main

import (
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
)

// TestBackgroundServerOutlivesExec (issue 24 item 5): a server an agent starts in the background the
// way agents do (`setsid nohup … &`) is still there for the next exec and through the ports API, on every
// provider: a machine keeps what ran in it until it stops. (Before: on the sandbox it died with the exec
// that started it.)
func TestBackgroundServerOutlivesExec(t *testing.T) {
	for i, prov := range []string{"local", "docker", "podman", "sandbox", "kubernetes"} {
		t.Run(prov, func(t *testing.T) {
			t.Parallel()
			requireProvider(t, prov)
			if _, err := exec.LookPath("python3"); (prov == "local" || prov == "sandbox") && err != nil {
				t.Skip("the " + prov + " machine serves with the host's python3, which this host lacks")
			}
			port := 8000
			if prov == "local" { // the host's own ports
				port = 41700 + i
			}
			e := newTestServer(t, withHostEnv)
			m := e.create(map[string]any{"provider": prov, "idleTimeoutSec": 0})
			defer e.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
			e.sh(m.ID, "mkdir -p www && echo bg-"+prov+" > www/index.html")
			// The issue's own command: no redirection, a new session, the exec returns at once.
			start := e.exec(m.ID, map[string]any{"cmd": fmt.Sprintf("cd www && setsid nohup python3 -m http.server %d &", port)})
			if start.ExitCode != 0 {
				t.Fatalf("starting the server: %+v", start)
			}
			// The next exec: the server answers (it may take a moment to bind; the loop is the machine's).
			probe := fmt.Sprintf(`python3 -c '
import time, urllib.request
for i in range(200):
    try:
        print(urllib.request.urlopen("http://127.0.0.1:%d/index.html", timeout=2).read().decode().strip()); break
    except Exception as e:
        err = e; time.sleep(0.1)
else:
    print("unreachable:", err)
'`, port)
			if out := strings.TrimSpace(e.sh(m.ID, probe)); out != "bg-"+prov {
				t.Fatalf("the background server from the next exec: %q", out)
			}
			// And once more, an exec later: still there.
			if out := strings.TrimSpace(e.sh(m.ID, probe)); out != "bg-"+prov {
				t.Fatalf("the background server two execs later: %q", out)
			}
			var b PortBinding
			e.call("POST", "/v1/computers/"+m.ID+"/ports", map[string]any{"port": port}, 200, &b)
			var body string
			eventually(t, "the background server to answer through its port binding", func() bool {
				resp, err := http.Get(b.URL + "/index.html")
				if err != nil {
					return false
				}
				defer resp.Body.Close()
				x, _ := io.ReadAll(resp.Body)
				body = strings.TrimSpace(string(x))
				return resp.StatusCode == 200
			})
			if body != "bg-"+prov {
				t.Fatalf("through the ports API: %q", body)
			}
			e.sh(m.ID, killScript("http.server", fmt.Sprint(port)))
		})
	}
}
