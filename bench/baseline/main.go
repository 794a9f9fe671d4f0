// Command baseline is the yardstick for agentd's /health numbers: a bare net/http server answering
// GET /health with the same JSON and header, measured by bench/foundation.sh in the same run, so the cost
// of agentd's middleware (auth, CORS, body cap, idempotency, routing) shows against the machine's ceiling.
package main

import (
	"net/http"
	"os"
	"time"
)

func main() {
	start := time.Now()
	http.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Agent-Version", "0.1.0")
		w.Header().Set("Content-Type", "application/json")
		up := int(time.Since(start).Seconds())
		w.Write([]byte(`{"ok":true,"uptimeSec":` + itoa(up) + `,"version":"0.1.0"}` + "\n"))
	})
	if err := http.ListenAndServe("127.0.0.1:"+os.Args[1], nil); err != nil {
		panic(err)
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}
