// computers_ssh_fs.go — the files of an ssh machine (computers_ssh.go): the machineFS of computers_files.go,
// done on the host over the machine's connection.
//
// Entry point: sshProvider.fs. Rules: the service's jail (computers_files.go) hands over clean guest
// paths under /work and /tmp; here they are mapped into the machine's directory (guestHost), resolved ON
// THE HOST (readlink -m: symlinks of the nearest existing ancestor followed) and mapped back (hostGuest),
// so a link leading out of the directory fails the jail. Reads and writes open the file first and check
// what was opened (/proc/self/fd/3) is still inside, as the engines' scripts do; archives are made and
// unpacked on the host by tar (API.md: only bytes cross the boundary), after the service checked an
// upload whole. Errors name guest paths, never the host's.
package main

import (
	"bytes"
	"context"
	"io"
	"strconv"
	"strings"
)

func (s *sshProvider) fs(m *ComputerInfo) machineFS { return &sshFS{s: s, m: m} }

type sshFS struct {
	s *sshProvider
	m *ComputerInfo
}

// sh runs a file script on the host over the machine's connection (opened when it is not).
func (f *sshFS) sh(ctx context.Context, stdin io.Reader, stdout io.Writer, script string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, fsOpTimeout)
	defer cancel()
	if _, err := f.s.connect(ctx, f.m); err != nil {
		return err
	}
	return f.s.call(ctx, f.m, stdin, stdout, script, args...)
}

// host maps a guest path into the machine's directory; dir is that directory.
func (f *sshFS) host(ctx context.Context, g string) (host, dir string, err error) {
	dir, err = f.s.dir(ctx, f.m)
	if err != nil {
		return "", "", err
	}
	h, ok := guestHost(dir, g)
	if !ok {
		return "", "", errOutside(g)
	}
	return h, dir, nil
}

// fail is fsFail with the host's directory turned back into guest paths.
func (f *sshFS) fail(op, g, dir string, err error) error {
	if ae, ok := err.(*apiError); ok {
		return ae
	}
	msg := err.Error()
	if dir != "" {
		msg = strings.ReplaceAll(strings.ReplaceAll(msg, dir+"/work", "/work"), dir+"/tmp", "/tmp")
	}
	return fsFail(op, g, &engineError{err: err, stderr: msg})
}

func (f *sshFS) resolve(ctx context.Context, paths []string) ([]string, error) {
	dir, err := f.s.dir(ctx, f.m)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(paths))
	var hosts []string
	var at []int
	for i, g := range paths {
		h, ok := guestHost(dir, g)
		if !ok {
			out[i] = "(host)" + g
			continue
		}
		hosts, at = append(hosts, h), append(at, i)
	}
	if len(hosts) == 0 {
		return out, nil
	}
	var res bytes.Buffer
	if err := f.sh(ctx, nil, &res, `for p; do readlink -m -- "$p" || echo "(unresolvable)$p"; done`, hosts...); err != nil {
		return nil, errorf(codeFSDenied, "cannot resolve paths on the ssh host: %s", firstLine(err.Error())).withHint("check the machine is running")
	}
	lines := strings.Split(strings.TrimSuffix(res.String(), "\n"), "\n")
	if len(lines) != len(hosts) {
		return nil, errorf(codeFSDenied, "cannot resolve paths on the ssh host").withHint("check the machine is running")
	}
	for k, r := range lines {
		if g, ok := hostGuest(dir, r); ok {
			out[at[k]] = g
		} else {
			out[at[k]] = "(host)" + r
		}
	}
	return out, nil
}

// sshOpenedInside is the host's half of the jail for reads and writes: what was opened on fd 3 must be
// inside the machine's work or tmp directory ($2), so a link swapped in after the resolve is caught on
// the object actually used.
const sshOpenedInside = `case "$(readlink /proc/self/fd/3)" in "$2"/work|"$2"/work/*|"$2"/tmp|"$2"/tmp/*) ;; *) echo "escapes the jail through a symlink" >&2; exit 3;; esac; `

func (f *sshFS) read(ctx context.Context, g string, w io.Writer) error {
	h, dir, err := f.host(ctx, g)
	if err != nil {
		return err
	}
	script := `exec 3< "$1" || exit 1; ` + sshOpenedInside +
		`if [ -d /proc/self/fd/3 ]; then echo "is a directory" >&2; exit 1; fi; exec cat <&3`
	if err := f.sh(ctx, nil, w, script, h, dir); err != nil {
		return f.fail("read", g, dir, err)
	}
	return nil
}

// write opens without truncating (<>), checks what it opened, and only then truncates and writes.
func (f *sshFS) write(ctx context.Context, g string, r io.Reader) error {
	h, dir, err := f.host(ctx, g)
	if err != nil {
		return err
	}
	script := `mkdir -p -- "$(dirname -- "$1")" && exec 3<> "$1" || exit 1; ` + sshOpenedInside +
		`: > /proc/self/fd/3 && exec cat >&3`
	if err := f.sh(ctx, r, io.Discard, script, h, dir); err != nil {
		return f.fail("write", g, dir, err)
	}
	return nil
}

func (f *sshFS) list(ctx context.Context, g string) ([]DirEntry, error) {
	h, dir, err := f.host(ctx, g)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := f.sh(ctx, nil, &out, findListScript, h); err != nil {
		return nil, f.fail("list", g, dir, err)
	}
	return parseFindList(out.String(), g), nil
}

func (f *sshFS) remove(ctx context.Context, g string, recursive bool) error {
	h, dir, err := f.host(ctx, g)
	if err != nil {
		return err
	}
	rec := "0"
	if recursive {
		rec = "1"
	}
	script := `[ -e "$1" ] || [ -L "$1" ] || { echo "no such file or directory" >&2; exit 1; }
if [ -d "$1" ] && [ ! -L "$1" ]; then if [ "$2" = 1 ]; then exec rm -rf -- "$1"; else exec rmdir -- "$1"; fi; else exec rm -f -- "$1"; fi`
	if err := f.sh(ctx, nil, io.Discard, script, h, rec); err != nil {
		return f.fail("delete", g, dir, err)
	}
	return nil
}

func (f *sshFS) untar(ctx context.Context, g string, archive []byte) (int, error) {
	h, dir, err := f.host(ctx, g)
	if err != nil {
		return 0, err
	}
	err = f.sh(ctx, bytes.NewReader(archive), io.Discard,
		`mkdir -p -- "$1" && exec tar -xzf - -C "$1" --no-same-owner --no-overwrite-dir --no-same-permissions`, h)
	if err != nil {
		return 0, f.fail("upload to", g, dir, err)
	}
	return 0, nil
}

func (f *sshFS) tar(ctx context.Context, g string, w io.Writer) (int64, error) {
	h, dir, err := f.host(ctx, g)
	if err != nil {
		return 0, err
	}
	if w == nil {
		var out bytes.Buffer
		err := f.sh(ctx, nil, &out, `[ -e "$1" ] || { echo "no such file or directory" >&2; exit 1; }
tar -czf - -C "$(dirname -- "$1")" -- "$(basename -- "$1")" | wc -c`, h)
		if err != nil {
			return 0, f.fail("download", g, dir, err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(out.String()), 10, 64)
		if err != nil {
			return 0, errorf(codeFSDenied, "cannot measure the archive of %s", g).withHint("check the host has tar and gzip")
		}
		return n, nil
	}
	cw := &countingWriter{w: w}
	if err := f.sh(ctx, nil, cw, `exec tar -czf - -C "$(dirname -- "$1")" -- "$(basename -- "$1")"`, h); err != nil {
		return cw.n, f.fail("download", g, dir, err)
	}
	return cw.n, nil
}
