package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// readmeSessionScript is the README's first session: its ```sh blocks, in order (```bash blocks are for
// the reader's own machine: installing, keys).
func readmeSessionScript(t *testing.T) string {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start := strings.Index(text, "\n## A first session\n")
	if start < 0 {
		t.Fatal("README.md has no '## A first session'")
	}
	section := text[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	blocks := regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1)
	if len(blocks) < 4 {
		t.Fatalf("the first session has %d sh blocks", len(blocks))
	}
	var script strings.Builder
	for _, m := range blocks {
		script.WriteString(m[1])
	}
	return script.String()
}

// TestReadmeFirstSession runs the README's first session, copy and paste, against a real server built
// from this tree and a loopback OpenAI-compatible model: if the README rots, this fails.
func TestReadmeFirstSession(t *testing.T) {
	for _, tool := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	script := readmeSessionScript(t)
	model := newScriptedOpenAI(t, func(r scriptReq) scriptReply {
		if strings.Contains(r.lastUser(), "hello.txt") {
			switch len(r.toolResults()) {
			case 0:
				return scriptReply{text: "Writing the file.", calls: []ToolCall{tc("c1", "write_file", map[string]any{"path": "hello.txt", "content": "hi\n"})}}
			case 1:
				return scriptReply{calls: []ToolCall{tc("c2", "shell", map[string]any{"command": "cat hello.txt"})}}
			}
			return scriptReply{text: "Done: hello.txt says hi."}
		}
		return scriptReply{text: "Hello!"}
	})
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	os.MkdirAll(bin, 0o755)
	if out, err := exec.Command("cp", cliBinary(t), filepath.Join(bin, "agentd")).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	home := filepath.Join(dir, "home")
	os.MkdirAll(home, 0o700)
	// Machines: the provider the reader would get, but on an image that is here (CI has no registry).
	cfg := "computerProvider: local\n"
	if os.Getenv("AGENT_TEST_DOCKER") == "1" {
		cfg = "computerProvider: docker\nimages: {base: " + testImage + ", python: " + testImage + ", node: " + testImage + ", full: " + testImage + "}\n"
	}
	os.WriteFile(filepath.Join(home, "config.yaml"), []byte(cfg), 0o600)
	os.WriteFile(filepath.Join(home, "instance-id"), []byte(testOwnerPrefix()+randomChars(4)+"\n"), 0o600) // seen by the leak check
	t.Cleanup(func() {                                                                                     // the session leaves its machines running, as a reader's would: remove them
		id, _ := os.ReadFile(filepath.Join(home, "instance-id"))
		if owner := strings.TrimSpace(string(id)); owner != "" && os.Getenv("AGENT_TEST_DOCKER") == "1" {
			out, _ := exec.Command("docker", "ps", "-aq", "--filter", "label=agentd.owner="+owner).Output()
			if ids := strings.Fields(string(out)); len(ids) > 0 {
				exec.Command("docker", append([]string{"rm", "-f", "-v"}, ids...)...).Run()
			}
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	script = strings.ReplaceAll(script, "127.0.0.1:7377", "127.0.0.1:"+port)
	work := filepath.Join(dir, "work")
	os.MkdirAll(work, 0o755)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", "trap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n"+script)
	cmd.Dir = work
	cmd.Env = []string{"PATH=" + bin + ":" + os.Getenv("PATH"), "HOME=" + dir, "AGENT_HOME=" + home,
		"AGENT_PORT=" + port, "AGENT_URL=http://127.0.0.1:" + port, "OPENAI_BASE_URL=" + model.URL, "NO_COLOR=1"}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	if os.Getenv("README_SESSION_OUT") != "" { // to refresh the outputs shown in the README
		os.WriteFile(os.Getenv("README_SESSION_OUT"), out.Bytes(), 0o644)
	}
	if err != nil {
		logText, _ := os.ReadFile(filepath.Join(work, "agentd.log"))
		t.Fatalf("the README's first session failed: %v\n%s\nserver log:\n%s", err, out.String(), logText)
	}
	for _, want := range []string{`"ok":true`, "created helper", "→ write_file", "hi", "Done: hello.txt says hi.",
		"complete", "hello from Linux", "name must be lowercase", `"stopReason":"complete"`, `"version"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the session's output lacks %q:\n%s", want, out.String())
		}
	}
}

// Every example is a valid agent the real server accepts, and the README names each one.
func TestExamplesApply(t *testing.T) {
	ts := newTestServer(t)
	files, _ := specFiles([]string{"examples"}) // not NAME.test.yaml (agent tests)
	if len(files) < 5 {
		t.Fatalf("only %d examples", len(files))
	}
	readme, _ := os.ReadFile("README.md")
	for _, f := range files {
		b, _ := os.ReadFile(f)
		res := ts.do("POST", "/v1/agents", b, "Content-Type", "application/yaml")
		if res.status != 201 {
			t.Errorf("%s: %d %s", f, res.status, res.body)
		}
		if !strings.Contains(string(readme), filepath.Base(f)) {
			t.Errorf("the README does not name %s", f)
		}
	}
	// The webhook and cron examples are mounted.
	tr := ts.do("GET", "/v1/triggers", nil).json(t)
	if !strings.Contains(string(mustMarshal(tr)), "/v1/w/triager/github") || len(tr["cron"].([]any)) != 1 {
		t.Fatalf("triggers: %v", tr)
	}
}

func mustMarshal(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// The webhook example (docs/triggers.md) posts to an agent and with a secret the shipped examples have:
// its URLs are mounted once examples/ is applied, and a body signed the page's way with the page's secret
// passes the signature check (issue 26 item 9). Links are TestDocsLinks's.
func TestDocsWebhookExample(t *testing.T) {
	readme, _ := os.ReadFile("docs/triggers.md")
	ts := newTestServer(t)
	files, _ := specFiles([]string{"examples"}) // not NAME.test.yaml (agent tests)
	for _, f := range files {
		b, _ := os.ReadFile(f)
		if res := ts.do("POST", "/v1/agents", b, "Content-Type", "application/yaml"); res.status != 201 {
			t.Fatalf("%s: %d %s", f, res.status, res.body)
		}
	}
	mounted := string(mustMarshal(ts.do("GET", "/v1/triggers", nil).json(t)))
	urls := regexp.MustCompile(`localhost:7377(/v1/w/[a-z0-9/_-]+)`).FindAllStringSubmatch(string(readme), -1)
	secrets := regexp.MustCompile(`-hmac '([^']+)'`).FindAllStringSubmatch(string(readme), -1)
	if len(urls) == 0 || len(secrets) == 0 {
		t.Fatal("docs/triggers.md has no webhook example")
	}
	n := 0
	for _, u := range urls {
		if !strings.Contains(mounted, `"at":"`+u[1]+`"`) {
			t.Errorf("docs/triggers.md posts to %s, which the examples do not mount: %s", u[1], mounted)
		}
		for _, sec := range secrets {
			n++ // a new body each time: a GitHub-signed body is accepted once per replay window
			body := fmt.Sprintf(`{"action":"opened","issue":{"title":"Crash on start","number":%d}}`, n)
			mac := hmac.New(sha256.New, []byte(sec[1]))
			mac.Write([]byte(body))
			res := ts.do("POST", u[1], body, "X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
			if res.status == http.StatusForbidden || res.status == http.StatusNotFound {
				t.Errorf("the signed example to %s with secret %q: %d %s", u[1], sec[1], res.status, res.body)
			}
		}
	}
}
