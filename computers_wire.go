// computers_wire.go — the exec channel's wire, every frame kind in one place: the header, the frame
// kinds, their JSON bodies and the limits both ends hold to (issue 27). The host half is
// computers_channel.go (and computers_channel_sock.go), the helper's computers_helper.go, TCP streams
// computers_stream.go.
//
// Entry points: writeFrame, readFrame, eachFrame, newFrameReader.
//
// A frame is a 9-byte header (request id uint32, kind byte, payload length uint32, big-endian) and the
// payload, at most maxFrame bytes. Who sends what, frame by frame:
//
//	kind  name           sender            id        payload                 meaning
//	 H    frameHello     helper → host     0         JSON helperHello        ready (first frame); on the socket: hello with the token
//	 U    frameUpgrade   host → helper     0         JSON chanUpgrade        move to the socket; on the socket, host → helper: confirmed;
//	                     helper → host     0         text                    on stdio: why the helper could not move
//	 S    frameStart     host → helper     request   JSON chanStart          run a process (or, with op, a file operation)
//	 I    frameStdin     host → helper     request   bytes                   the process's stdin
//	 E    frameStdinEOF  host → helper     request   —                       close the process's stdin
//	 K    frameKill      host → helper     request   —                       kill the process group
//	 O    frameStdout    helper → host     request   bytes                   output (a file operation's too)
//	 R    frameStderr    helper → host     request   bytes                   output; id 0: the helper's own complaint
//	 X    frameExit      helper → host     request   JSON chanExit           the request is over
//	 A    frameAck       both ways         request   uint32                  bytes consumed: output (host), stdin (helper);
//	                     both ways         stream    uint32                  a stream's bytes consumed
//	 P    frameOpen      host → helper     stream    JSON {"port":N}         connect to 127.0.0.1:N inside the machine
//	 Y    frameOpened    helper → host     stream    —                       that connection is up
//	 L    frameListen    host → helper     0         JSON {"port":N}         accept on 127.0.0.1:N inside (the egress proxy)
//	 N    frameAccept    helper → host     stream*   —                       a connection accepted there is a new stream
//	 D    frameData      both ways         stream    bytes                   a stream's bytes
//	 F    frameFin       both ways         stream    —                       no more bytes this way
//	 Z    frameClose     both ways         stream    text (may be empty)     the stream is over, and why
//
// Request and host-opened stream ids are the host's (counting up from 1); stream* ids are the helper's,
// with helperStream set, so the two never collide. Flow control: at most chanWindow bytes of one
// request's output (or stdin, or one stream's data) are unacknowledged at once.
//
// Rules: every frame the host reads comes from the machine, an untrusted peer: readFrame refuses a
// payload over maxFrame before allocating it, and each reader ignores a kind it does not expect.
package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
)

const (
	frameHello    = 'H'
	frameUpgrade  = 'U'
	frameStart    = 'S'
	frameStdin    = 'I'
	frameStdinEOF = 'E'
	frameKill     = 'K'
	frameStdout   = 'O'
	frameStderr   = 'R'
	frameExit     = 'X'
	frameAck      = 'A'
	frameOpen     = 'P'
	frameOpened   = 'Y'
	frameListen   = 'L'
	frameAccept   = 'N'
	frameData     = 'D'
	frameFin      = 'F'
	frameClose    = 'Z'

	helperStream = uint32(1) << 31 // set in the ids of streams the helper opened (frameAccept)

	maxFrame     = 1 << 20   // the largest payload either side accepts
	chanWindow   = 4 << 20   // bytes per request or stream in flight before the sender waits for an ack
	chanChunk    = 64 << 10  // stdin frames
	chanOutChunk = 256 << 10 // the most one output frame carries (one read of a grown pipe)
)

// helperHello is the helper's first frame: its pid, and what it can do beyond the first protocol (a
// helper of an older agentd, still mounted in a machine made before an upgrade, says less).
type helperHello struct {
	Pid  int  `json:"pid"`
	Sock bool `json:"sock"` // it moves to a socket on frameUpgrade (computers_channel_sock.go)
}

// chanUpgrade is frameUpgrade's body: the socket's path as the machine sees it, and the token its hello carries.
type chanUpgrade struct {
	Path  string `json:"path"`
	Token string `json:"token"`
}

// chanStart asks the helper to run one process.
type chanStart struct {
	Argv  []string          `json:"argv"`
	Cwd   string            `json:"cwd"`
	Env   map[string]string `json:"env,omitempty"`
	Stdin bool              `json:"stdin,omitempty"` // stdin frames follow; else stdin is /dev/null
	Token string            `json:"token"`
	Op    string            `json:"op,omitempty"` // a file operation done by the helper itself; Argv are its paths
}

// chanExit ends a request: the exit code (128+signal when killed), or why the process never ran.
type chanExit struct {
	Code  int    `json:"code"`
	Error string `json:"error,omitempty"`
}

func writeFrame(w io.Writer, id uint32, kind byte, payload []byte) error {
	var h [9]byte
	binary.BigEndian.PutUint32(h[0:4], id)
	h[4] = kind
	binary.BigEndian.PutUint32(h[5:9], uint32(len(payload)))
	if len(payload) == 0 {
		_, err := w.Write(h[:])
		return err
	}
	buf := make([]byte, 0, 9+len(payload)) // one write: frames from several goroutines never interleave
	buf = append(append(buf, h[:]...), payload...)
	_, err := w.Write(buf)
	return err
}

// eachFrame hands every frame read from r to f, in order, until a read fails; it returns that error.
func eachFrame(r io.Reader, f func(id uint32, kind byte, payload []byte)) error {
	for {
		id, kind, payload, err := readFrame(r)
		if err != nil {
			return err
		}
		f(id, kind, payload)
	}
}

// newFrameReader buffers a connection for readFrame: output frames are up to 1 MiB.
func newFrameReader(r io.Reader) *bufio.Reader { return bufio.NewReaderSize(r, 256<<10) }

func readFrame(r io.Reader) (id uint32, kind byte, payload []byte, err error) {
	var h [9]byte
	if _, err = io.ReadFull(r, h[:]); err != nil {
		return 0, 0, nil, err
	}
	n := binary.BigEndian.Uint32(h[5:9])
	if n > maxFrame {
		return 0, 0, nil, fmt.Errorf("exec channel: a frame of %d bytes is over the %d limit", n, maxFrame)
	}
	payload = make([]byte, n)
	if _, err = io.ReadFull(r, payload); err != nil {
		return 0, 0, nil, err
	}
	return binary.BigEndian.Uint32(h[0:4]), h[4], payload, nil
}
