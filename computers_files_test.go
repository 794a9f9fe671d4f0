package main

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestJailHoldsThroughPlantedSymlink plants /work/out -> a directory outside the workspace and tries every
// file tool and every file endpoint through it: each is refused with E_FS_DENIED and nothing outside
// changes. On local, outside is a host directory; in a container, /dev/shm (writable, outside the jail).
func TestJailHoldsThroughPlantedSymlink(t *testing.T) {
	for _, prov := range []string{"local", "docker"} {
		t.Run(prov, func(t *testing.T) {
			requireProvider(t, prov)
			e := newTestServer(t, withHostEnv)
			m := e.create(map[string]any{"provider": prov, "image": testImage})

			// The outside directory, with one file, and a way to list what it holds.
			var outside string
			var outsideState func() string
			if prov == "local" {
				outside = t.TempDir()
				os.WriteFile(filepath.Join(outside, "secret"), []byte("host secret\n"), 0o644)
				outsideState = func() string {
					var names []string
					filepath.Walk(outside, func(p string, fi os.FileInfo, err error) error {
						if err == nil {
							b, _ := os.ReadFile(p)
							names = append(names, strings.TrimPrefix(p, outside)+"="+string(b))
						}
						return nil
					})
					return strings.Join(names, ",")
				}
			} else {
				outside = "/dev/shm/outside"
				e.exec(m.ID, map[string]any{"cmd": "mkdir -p /dev/shm/outside && echo 'machine secret' > /dev/shm/outside/secret"})
				outsideState = func() string {
					return e.exec(m.ID, map[string]any{"cmd": "cd /dev/shm/outside && find . -exec sh -c 'printf \"%s=\" \"$1\"; [ -f \"$1\" ] && cat \"$1\"' _ {} \\;"}).Stdout
				}
			}
			// Plant the link, a directory and a file to move, from inside the machine (relative
			// paths: on local an absolute /work inside a command is the host's).
			if r := e.exec(m.ID, map[string]any{"cmd": "ln -s " + outside + " out && mkdir -p d/sub && echo x > d/sub/f && echo y > file.txt"}); r.ExitCode != 0 {
				t.Fatalf("planting: %+v", r)
			}
			before := outsideState()

			// Every file endpoint.
			q := "?path=" + url.QueryEscape("/work/out/secret")
			e.wantError("GET", "/v1/computers/"+m.ID+"/fs/read"+q, nil, 403, codeFSDenied)
			e.wantError("PUT", "/v1/computers/"+m.ID+"/fs/write?path="+url.QueryEscape("/work/out/new"), "data", 403, codeFSDenied)
			e.wantError("GET", "/v1/computers/"+m.ID+"/fs?path="+url.QueryEscape("/work/out"), nil, 403, codeFSDenied)
			e.wantError("DELETE", "/v1/computers/"+m.ID+"/fs"+q, nil, 403, codeFSDenied)
			e.wantError("GET", "/v1/computers/"+m.ID+"/fs/download?path="+url.QueryEscape("/work/out"), nil, 403, codeFSDenied)
			e.wantError("POST", "/v1/computers/"+m.ID+"/fs/upload?path="+url.QueryEscape("/work/out"),
				tarGz(t, nil, nil), 403, codeFSDenied)

			// Every file tool, run by an agent whose computer is this machine.
			sp := testSpec("jailed", nil)
			ar := newActiveRun(e.s.runs, sp, &runParams{Input: []ModelMessage{textMessage("user", "x")}, MaxSteps: 1, ComputerID: m.ID}, nil)
			defer func() { ar.cancel(nil); ar.stopTimer() }()
			env := &toolEnv{ar: ar, delta: func(string, string) {}}
			for _, tc := range []struct {
				tool string
				args map[string]any
			}{
				{"read_file", map[string]any{"path": "out/secret"}},
				{"write_file", map[string]any{"path": "out/new", "content": "x"}},
				{"edit_file", map[string]any{"path": "out/secret", "old_string": "secret", "new_string": "owned"}},
				{"list_dir", map[string]any{"path": "out"}},
				{"search_files", map[string]any{"pattern": "secret", "path": "out"}},
				{"move", map[string]any{"from": "file.txt", "to": "out/moved.txt"}},
				{"move", map[string]any{"from": "d", "to": "out"}},      // a directory into the link
				{"move", map[string]any{"from": "d", "to": "out/d2"}},   // a directory through the link
				{"move", map[string]any{"from": "out", "to": "stolen"}}, // the outside brought in
				{"delete", map[string]any{"path": "out/secret"}},
			} {
				out, err := toolCatalog()[tc.tool].run(context.Background(), env, tc.args)
				if err == nil || asAPIError(err).Code != codeFSDenied {
					t.Errorf("%s %v: want E_FS_DENIED, got %q, %v", tc.tool, tc.args, out, err)
				}
				if after := outsideState(); after != before {
					t.Fatalf("%s %v changed the outside: %q -> %q", tc.tool, tc.args, before, after)
				}
			}
		})
	}
}

// An image that is neither present nor pullable is a clear 503 naming the flavor, the image and both
// fixes; the doctor lists each flavor's image and whether it is here.
func TestMissingImageIsExplained(t *testing.T) {
	requireProvider(t, "docker")
	e := newTestServer(t, withHostEnv, func(c *testSetup) {
		c.Images = map[string]string{"base": testImage, "python": "localhost:1/agentd-no-such-image:1"}
	})
	env := e.wantError("POST", "/v1/computers", map[string]any{"provider": "docker", "flavor": "python"}, 503, codeProviderUnavailable)
	msg, hint := fmt.Sprint(env["message"]), fmt.Sprint(env["hint"])
	for _, want := range []string{"python flavor", "localhost:1/agentd-no-such-image:1"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	for _, want := range []string{"docker pull localhost:1/agentd-no-such-image:1", "docker load", "images: {python:"} {
		if !strings.Contains(hint, want) {
			t.Errorf("hint %q lacks %q", hint, want)
		}
	}
	var rep DoctorReport
	eventually(t, "the doctor to select a proven provider", func() bool { // its trial runs in the background
		e.call("GET", "/v1/doctor", nil, 200, &rep)
		return rep.Selection.Provider != ""
	})
	found := map[string]doctorImage{}
	for _, im := range rep.Images {
		found[im.Flavor] = im
	}
	if !found["base"].Present || found["base"].Image != testImage || found["python"].Present || len(found) != len(flavors) {
		t.Fatalf("doctor images: %+v", rep.Images)
	}
}

// What a valid spec can still ask that this host cannot give is a 422 naming the limit, never an
// engine's 500: CPUs above the host's, memory below a floor, disk above a ceiling, an image from a
// registry the server does not pull from, a package name outside the package managers' grammar.
func TestHostLimitsAre422(t *testing.T) {
	ts := newTestServer(t)
	for _, tc := range []struct {
		body map[string]any
		msg  string
	}{
		{map[string]any{"provider": "local", "cpus": float64(runtime.NumCPU() + 1)}, fmt.Sprintf("this host's %d CPUs", runtime.NumCPU())},
		{map[string]any{"provider": "local", "memoryMb": 5}, "below the 64 MB"},
		{map[string]any{"provider": "local", "diskMb": 2 << 20}, "above the 1048576 MB ceiling"},
		{map[string]any{"provider": "local", "image": "localhost:7377/evil:1"}, "registry localhost:7377"},
		{map[string]any{"provider": "local", "image": "evil.example:5000/x"}, "registry evil.example:5000"},
		{map[string]any{"provider": "local", "packages": []any{"-o", "APT::Get::foo"}}, "invalid package name"},
		{map[string]any{"provider": "local", "packages": []any{"curl; rm -rf /"}}, "invalid package name"},
	} {
		env := ts.wantError("POST", "/v1/computers", tc.body, 422, codeSpecInvalid)
		if !strings.Contains(fmt.Sprint(env), tc.msg) {
			t.Errorf("%v: %v, want %q", tc.body, env, tc.msg)
		}
	}
	for _, ok := range []string{"python3", "g++", "libc6:amd64", "curl=7.88.1-10+deb12u5", "python3.11"} {
		if !packageName.MatchString(ok) {
			t.Errorf("%q refused", ok)
		}
	}
	if imageRegistry("debian:bookworm") != "docker.io" || imageRegistry("ghcr.io/a/b:1") != "ghcr.io" || imageRegistry("library/debian") != "docker.io" {
		t.Error("imageRegistry")
	}
}

// In a container, /work/x is swapped between a file and a symlink to /etc/passwd by a loop inside the
// machine while it is read: what the read opened is checked, so /etc/passwd never comes back.
func TestEngineSymlinkSwapRace(t *testing.T) {
	requireProvider(t, "docker")
	e := newTestServer(t, withHostEnv)
	m := e.create(map[string]any{"provider": "docker", "image": testImage})
	// python3 swaps with two syscalls per turn (the test image has it; a shell loop forks four times).
	loop := `echo plain > p; python3 -c 'import os,time
end=time.time()+120
while time.time()<end:
    os.symlink("/etc/passwd","l.tmp"); os.rename("l.tmp","x")
    os.link("p","f.tmp"); os.rename("f.tmp","x")' >/dev/null 2>&1 &`
	if r := e.exec(m.ID, map[string]any{"cmd": loop}); r.ExitCode != 0 {
		t.Fatalf("starting the swap loop: %+v", r)
	}
	escapes, plain := 0, 0
	for range 100 {
		var buf strings.Builder
		err := e.s.computers.readTo(context.Background(), m.ID, "/work/x", &buf)
		switch {
		case strings.Contains(buf.String(), "root:"):
			escapes++
		case err == nil:
			plain++
		}
	}
	if escapes != 0 {
		t.Fatalf("%d of 100 reads returned /etc/passwd", escapes)
	}
	t.Logf("100 reads: %d plain, %d refused, 0 escapes", plain, 100-plain)
}

// A tar whose links chain (`l1 -> .`, `l2 -> l1/..`, `l3 -> l2/..`) is lexically inside at every step but
// climbs one level per link: refused. A chain that stays inside is accepted.
func TestArchiveChainedLinksRefused(t *testing.T) {
	escape := tarGz(t, []tar.Header{
		{Name: "up/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "up/l1", Typeflag: tar.TypeSymlink, Linkname: "."},
		{Name: "up/l2", Typeflag: tar.TypeSymlink, Linkname: "l1/.."},
		{Name: "up/l3", Typeflag: tar.TypeSymlink, Linkname: "l2/.."},
	}, nil)
	if _, err := checkArchive(escape, 1<<20); err == nil || !strings.Contains(err.Error(), "up/l3") {
		t.Fatalf("chained links: want refusal naming up/l3, got %v", err)
	}
	inside := tarGz(t, []tar.Header{
		{Name: "a/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "a/l1", Typeflag: tar.TypeSymlink, Linkname: "."},
		{Name: "a/l2", Typeflag: tar.TypeSymlink, Linkname: "l1/.."},
		{Name: "a/l3", Typeflag: tar.TypeSymlink, Linkname: "l2/a/l1"},
	}, nil)
	if _, err := checkArchive(inside, 1<<20); err != nil {
		t.Fatalf("a chain that stays inside was refused: %v", err)
	}
}

// On local, /work/x is swapped between a file and a symlink to a host file while it is read 1,000 times:
// every read returns the file or a refusal, never the host file (os.Root resolves and opens in one step).
func TestLocalSymlinkSwapRace(t *testing.T) {
	e := newTestServer(t, withHostEnv)
	m := e.create(map[string]any{"provider": "local"})
	host := filepath.Join(t.TempDir(), "host-secret")
	os.WriteFile(host, []byte("HOST SECRET"), 0o644)
	work := filepath.Join(e.s.cfg.Home, "workspaces", m.ID, "work")
	if _, err := os.Stat(work); err != nil {
		t.Fatalf("workspace not where expected: %v", err)
	}
	os.WriteFile(filepath.Join(work, "plain"), []byte("plain file"), 0o644)
	os.Symlink(host, filepath.Join(work, "link"))

	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // swap /work/x atomically between the two, as fast as it can
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			src := "plain"
			if i%2 == 1 {
				src = "link"
			}
			tmp := filepath.Join(work, ".swap")
			os.Remove(tmp)
			if fi, _ := os.Lstat(filepath.Join(work, src)); fi != nil && fi.Mode()&os.ModeSymlink != 0 {
				os.Symlink(host, tmp)
			} else {
				os.Link(filepath.Join(work, "plain"), tmp)
			}
			os.Rename(tmp, filepath.Join(work, "x"))
		}
	}()
	escapes, files := 0, 0
	for range 1000 {
		var buf strings.Builder
		err := e.s.computers.readTo(context.Background(), m.ID, "/work/x", &buf)
		switch {
		case strings.Contains(buf.String(), "HOST SECRET"):
			escapes++
		case err == nil:
			files++
		}
	}
	close(stop)
	<-done
	if escapes != 0 {
		t.Fatalf("%d of 1000 reads returned the host file", escapes)
	}
	if files == 0 {
		t.Fatal("no read saw the plain file: the race was not exercised")
	}
	t.Logf("1000 reads: %d plain, %d refused, 0 escapes", files, 1000-files)
}

// Eight parallel reads of a 250 MB file stream through the server: its peak resident memory grows by far
// less than one file (the whole file was buffered per request before: 2 GB for eight).
func TestLargeReadsStream(t *testing.T) {
	e := newTestServer(t, withHostEnv)
	m := e.create(map[string]any{"provider": "local"})
	const size = 250 << 20
	big := filepath.Join(e.s.cfg.Home, "workspaces", m.ID, "work", "big.bin")
	if err := os.Truncate(mustCreate(t, big), size); err != nil { // sparse: reads are zeros, no disk
		t.Fatal(err)
	}
	runtime.GC()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Skipf("cannot reset the peak RSS here: %v", err)
	}
	before := procStatusKB(t, "VmHWM")
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := e.request(context.Background(), "GET", "/v1/computers/"+m.ID+"/fs/read?path=big.bin", nil, nil)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				errs <- err
				return
			}
			defer res.Body.Close()
			n, err := io.Copy(io.Discard, res.Body)
			if err == nil && (res.StatusCode != 200 || n != size) {
				err = fmt.Errorf("status %d, %d bytes", res.StatusCode, n)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	grew := procStatusKB(t, "VmHWM") - before
	t.Logf("8 × 250 MB read: peak RSS grew by %d MB", grew>>10)
	limit := 100 << 10
	if raceBuild() {
		limit *= 4 // the race detector's shadow memory multiplies what the buffers touch
	}
	if grew > limit {
		t.Fatalf("peak RSS grew by %d MB reading 8 × 250 MB: reads are buffered, not streamed", grew>>10)
	}
	// Past the read limit the answer is still a clean 429 before any byte, also for a large file.
	e.s.computers.readLimit = 100 << 20
	defer func() { e.s.computers.readLimit = 256 << 20 }()
	e.wantError("GET", "/v1/computers/"+m.ID+"/fs/read?path=big.bin", nil, 429, codeQuota)
}

func mustCreate(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	return p
}

// procStatusKB reads a kB field of /proc/self/status.
func procStatusKB(t *testing.T, field string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc here")
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return n
		}
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}

// raceBuild reports whether this test binary was built with -race.
func raceBuild() bool {
	bi, _ := debug.ReadBuildInfo()
	return bi != nil && slices.ContainsFunc(bi.Settings, func(s debug.BuildSetting) bool { return s.Key == "-race" && s.Value == "true" })
}

// Mount sources: only under allowedMounts, and never the engine's socket, the root, /proc, /sys, /dev,
// /run or the data directory, whatever the config says, also through a symlink.
func TestMountSources(t *testing.T) {
	home, allowed := t.TempDir(), t.TempDir()
	os.MkdirAll(filepath.Join(allowed, "data"), 0o755)
	sock := filepath.Join(allowed, "engine.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	os.Symlink(sock, filepath.Join(allowed, "innocent"))
	os.Symlink("/", filepath.Join(allowed, "rootlink"))
	c := &computerService{computerDeps: computerDeps{home: home, mountRoots: []string{allowed, "/", "/run", home}}}
	for _, src := range []string{"/var/run/docker.sock", "/run/docker.sock", "/", "/proc", "/sys/fs", "/dev", home,
		filepath.Join(home, "workspaces"), filepath.Dir(home), sock, filepath.Join(allowed, "innocent"),
		filepath.Join(allowed, "rootlink"), "/work/../"} {
		if err := c.checkMountSource(src); err == nil {
			t.Errorf("%s: accepted", src)
		}
	}
	c.mountRoots = []string{allowed}
	for _, src := range []string{"/srv/elsewhere", filepath.Join(allowed, "rootlink", "etc", "not-yet")} {
		if err := c.checkMountSource(src); err == nil || !strings.Contains(err.Error(), "allowedMounts") {
			t.Errorf("%s, outside allowedMounts once resolved: %v", src, err)
		}
	}
	for _, src := range []string{allowed, filepath.Join(allowed, "data"), filepath.Join(allowed, "not-yet")} {
		if err := c.checkMountSource(src); err != nil {
			t.Errorf("%s: %v, want accepted", src, err)
		}
	}
	// Through the API: the default config allows no host mount at all.
	e := newTestServer(t, withHostEnv)
	for _, src := range []string{"/var/run/docker.sock", "/", e.s.cfg.Home, filepath.Join(allowed, "data")} {
		body := map[string]any{"provider": "docker", "mounts": []any{map[string]any{"source": src, "target": "/data"}}}
		if msg := e.wantError("POST", "/v1/computers", body, 422, codeSpecInvalid)["message"].(string); !strings.Contains(msg, "mounts.0.source") {
			t.Errorf("%s: %s", src, msg)
		}
	}
}

// TestTarToRoundTrip: the one writer and the one extractor agree: a tree with a hidden file, a nested
// directory and a relative link comes back the same under the new top name, the link stored as a link;
// a single file and a link at the top are archived as themselves; the tree's root given as "." works.
func TestTarToRoundTrip(t *testing.T) {
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "d", "sub"), 0o755)
	os.WriteFile(filepath.Join(src, "d", ".hidden"), []byte("h"), 0o600)
	os.WriteFile(filepath.Join(src, "d", "sub", "f"), []byte("f"), 0o644)
	os.Symlink("sub/f", filepath.Join(src, "d", "ln"))
	os.Symlink("d", filepath.Join(src, "top-link"))
	for _, c := range []struct {
		fsys      fs.FS
		name, top string
		want      map[string]string // path -> content, or "->target" for a link
	}{
		{os.DirFS(src), "d", "copy", map[string]string{"copy/.hidden": "h", "copy/sub/f": "f", "copy/ln": "->sub/f"}},
		{os.DirFS(filepath.Join(src, "d")), ".", "dot", map[string]string{"dot/.hidden": "h", "dot/sub/f": "f", "dot/ln": "->sub/f"}},
		{os.DirFS(src), "d/sub/f", "one", map[string]string{"one": "f"}},
		{os.DirFS(src), "top-link", "tl", map[string]string{"tl": "->d"}},
	} {
		var buf bytes.Buffer
		if err := tarTo(t.Context(), &buf, c.fsys, c.name, c.top); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		dst := t.TempDir()
		root, _ := os.OpenRoot(dst)
		_, err := untarTo(root, &buf, nil)
		root.Close()
		if err != nil {
			t.Fatalf("%s: untar: %v", c.name, err)
		}
		for p, want := range c.want {
			got := ""
			if l, err := os.Readlink(filepath.Join(dst, p)); err == nil {
				got = "->" + l
			} else if b, err := os.ReadFile(filepath.Join(dst, p)); err == nil {
				got = string(b)
			}
			if got != want {
				t.Errorf("%s: %s is %q, want %q", c.name, p, got, want)
			}
		}
	}
}
