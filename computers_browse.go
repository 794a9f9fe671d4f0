// computers_browse.go — `browse`: one page fetched from inside a machine, read as text (issue 28).
//
// Entry points: computerService.Browse (the `browse` tool and POST /v1/computers/:id/browse),
// computerService.machineDial (a connection to 127.0.0.1:port inside a machine; the browser's DevTools
// port uses it too), parsePage (HTML → title, text, links; fetch_url's htmlToText is its text).
//
// Rules: the fetch is the machine's, not the host's: `localhost`, `127.0.0.1` and `::1` are the machine's
// own loopback (reached over the exec channel, the machine's port path; on local and a host-networked
// sandbox the host's, which is then the machine's), always reachable; every other host obeys the
// machine's network block exactly as its egress proxy does (netPolicy.dial: deny, allow, private and the
// host's own addresses refused), and in mode none nothing but the machine's own loopback answers. Every
// redirect is dialled the same way. At most maxBytes of the body are kept; scripts, styles and templates
// never reach the text. Each browse is a `browsed` event on `computers`.
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/net/html"
)

// BrowseRequest is the body of POST /v1/computers/:id/browse.
type BrowseRequest struct {
	URL        string `json:"url"`
	Follow     *bool  `json:"follow,omitempty"`     // follow redirects (default true)
	TimeoutSec int    `json:"timeoutSec,omitempty"` // 1..120, default 30
	MaxBytes   int    `json:"maxBytes,omitempty"`   // 1024..4000000, default 1000000
}

// BrowseResult is a page read from inside the machine.
type BrowseResult struct {
	URL          string     `json:"url"`
	RequestedURL string     `json:"requestedUrl"`
	Status       int        `json:"status"`
	ContentType  string     `json:"contentType"`
	Title        string     `json:"title"`
	Text         string     `json:"text"`
	Links        []pageLink `json:"links"`
	Bytes        int        `json:"bytes"`
	TotalBytes   int64      `json:"totalBytes"`
	Truncated    bool       `json:"truncated"`
	ElapsedMS    int64      `json:"elapsedMs"`
}

type pageLink struct {
	Text string `json:"text"`
	Href string `json:"href"`
}

const (
	browseMaxLinks     = 300
	browseDefaultBytes = 1_000_000
	browseCountLimit   = 64 << 20 // past maxBytes the rest is counted (totalBytes) up to this, never kept
)

// checkBrowse validates a browse body and fills its defaults.
func checkBrowse(req *BrowseRequest) (*url.URL, error) {
	if req.URL == "" {
		return nil, errorf(codeSpecInvalid, "url: Required").withHint(`send {"url": "http://localhost:8000/"}`)
	}
	u, err := url.Parse(req.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errorf(codeSpecInvalid, "url: expected an http or https URL, received %q", req.URL).
			withHint(`send {"url": "http://localhost:8000/"}`)
	}
	switch {
	case req.TimeoutSec == 0:
		req.TimeoutSec = 30
	case req.TimeoutSec < 1 || req.TimeoutSec > 120:
		return nil, errorf(codeSpecInvalid, "timeoutSec: must be between 1 and 120, received %d", req.TimeoutSec)
	}
	switch {
	case req.MaxBytes == 0:
		req.MaxBytes = browseDefaultBytes
	case req.MaxBytes < 1024 || req.MaxBytes > 4_000_000:
		return nil, errorf(codeSpecInvalid, "maxBytes: must be between 1024 and 4000000, received %d", req.MaxBytes)
	}
	return u, nil
}

// isLoopbackName: the host names that mean the machine itself.
func isLoopbackName(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// machineDial connects to 127.0.0.1:port inside machine m: on the host where the machine shares the
// host's network, else over its exec channel (the path its exposed ports take).
func (c *computerService) machineDial(ctx context.Context, m *ComputerInfo, port int) (halfConn, error) {
	p := c.providerByName(m.Provider)
	if p == nil {
		return nil, errorf(codeComputerFailed, "computer %s has no provider %q here", m.ID, m.Provider)
	}
	if sharesHostNetwork(p, m) {
		conn, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			return nil, err
		}
		return asHalfConn(conn), nil
	}
	host, ok := p.(channelHost)
	if !ok {
		return nil, errorf(codeComputerFailed, "the %s provider cannot reach a machine's loopback", m.Provider)
	}
	ch, err := c.channelErr(ctx, host, m)
	if err != nil {
		return nil, errorf(codeComputerFailed, "the loopback of computer %s is reached over its exec channel, which is unavailable: %v", m.ID, err).
			withHint("turn execChannel on in config.yaml (" + takesEffect("execChannel") + ")")
	}
	return ch.dial(ctx, port)
}

// streamConn makes a halfConn (a channel stream) a net.Conn for net/http; deadlines are the request's
// context, which closes the stream.
type streamConn struct{ halfConn }

type streamAddr struct{}

func (streamAddr) Network() string                  { return "agentd-channel" }
func (streamAddr) String() string                   { return "machine" }
func (streamConn) LocalAddr() net.Addr              { return streamAddr{} }
func (streamConn) RemoteAddr() net.Addr             { return streamAddr{} }
func (streamConn) SetDeadline(time.Time) error      { return nil }
func (streamConn) SetReadDeadline(time.Time) error  { return nil }
func (streamConn) SetWriteDeadline(time.Time) error { return nil }

func asNetConn(h halfConn) net.Conn {
	if c, ok := h.(net.Conn); ok {
		return c
	}
	return streamConn{h}
}

// machineClient is an HTTP client whose connections are the machine's: its loopback through
// machineDial, everything else through its network policy (the egress proxy's dial).
func (c *computerService) machineClient(m *ComputerInfo, timeout time.Duration, follow bool) *http.Client {
	n := m.Spec.Network
	np := netPolicy{mode: n.Mode, allow: n.Allow, deny: n.Deny}
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	tr := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			if isLoopbackName(host) {
				pn, err := strconv.Atoi(port)
				if err != nil {
					return nil, err
				}
				hc, err := c.machineDial(ctx, m, pn)
				if err != nil {
					return nil, err
				}
				return asNetConn(hc), nil
			}
			if n.Mode == "none" {
				return nil, denied("computer %s has network mode none: it reaches only its own localhost, not %s", m.ID, host)
			}
			return np.dial(ctx, dialer, network, addr)
		},
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: timeout,
		DisableKeepAlives:     true,
	}
	return &http.Client{Transport: tr, Timeout: timeout, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if !follow {
			return http.ErrUseLastResponse
		}
		if len(via) >= 10 {
			return errorf(codeToolError, "stopped after 10 redirects")
		}
		if isLoopbackName(req.URL.Hostname()) {
			return nil
		}
		return np.checkURL(req.URL)
	}}
}

// Browse fetches a page from inside machine id and reads it.
func (c *computerService) Browse(ctx context.Context, id string, req BrowseRequest) (*BrowseResult, error) {
	u, err := checkBrowse(&req)
	if err != nil {
		return nil, err
	}
	m, _, err := c.getLive(ctx, id)
	if err != nil {
		return nil, err
	}
	if m.Spec.Network.Mode == "none" && !isLoopbackName(u.Hostname()) {
		return nil, denied("computer %s has network mode none: it reaches only its own localhost, not %s", m.ID, u.Hostname())
	}
	if !isLoopbackName(u.Hostname()) {
		n := m.Spec.Network
		if err := (netPolicy{mode: n.Mode, allow: n.Allow, deny: n.Deny}).checkURL(u); err != nil {
			return nil, err
		}
	}
	c.beginUse(m.ID)
	defer c.endUse(m.ID)
	t0 := time.Now()
	timeout := time.Duration(req.TimeoutSec) * time.Second
	client := c.machineClient(m, timeout, req.Follow == nil || *req.Follow)
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, errorf(codeSpecInvalid, "url: %v", err)
	}
	hreq.Header.Set("User-Agent", "agentd/"+version+" (browse)")
	hreq.Header.Set("Accept", "text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.5")
	resp, err := client.Do(hreq)
	if err != nil {
		var ae *apiError
		if errors.As(err, &ae) {
			return nil, ae
		}
		return nil, errorf(codeToolError, "cannot fetch %s from inside computer %s: %v", u, m.ID, unwrapURLError(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(req.MaxBytes)+1))
	if err != nil {
		return nil, errorf(codeToolError, "reading %s: %v", u, unwrapURLError(err))
	}
	out := &BrowseResult{URL: resp.Request.URL.String(), RequestedURL: req.URL, Status: resp.StatusCode,
		ContentType: resp.Header.Get("Content-Type"), Links: []pageLink{}}
	total := int64(len(body))
	if len(body) > req.MaxBytes {
		body, out.Truncated = body[:req.MaxBytes], true
		rest, _ := io.Copy(io.Discard, io.LimitReader(resp.Body, browseCountLimit))
		total += rest
	}
	if resp.ContentLength > total {
		total = resp.ContentLength
	}
	out.Bytes, out.TotalBytes = len(body), total
	switch ct := strings.ToLower(out.ContentType); {
	case strings.Contains(ct, "html") || (ct == "" && looksHTML(body)):
		pg := parsePage(body, resp.Request.URL)
		out.Title, out.Text, out.Links = pg.title, pg.text, pg.links
	case strings.HasPrefix(ct, "text/") || strings.Contains(ct, "json") || strings.Contains(ct, "xml") || ct == "":
		if !isBinary(body) {
			out.Text = strings.ToValidUTF8(string(body), "\uFFFD")
		}
	}
	out.ElapsedMS = time.Since(t0).Milliseconds()
	c.hub.publish("computers", "browsed", map[string]any{"id": m.ID, "computerId": m.ID, "url": out.URL, "status": out.Status})
	return out, nil
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// page is what parsePage reads from HTML.
type page struct {
	title string
	text  string
	links []pageLink
}

// skippedTags never reach a page's text (their content is code, markup or metadata).
var skippedTags = map[string]bool{"script": true, "style": true, "noscript": true, "template": true, "svg": true, "head": true}

// parsePage reads a page's title, its readable text (block elements on lines, no scripts, styles or
// templates) and its links (at most browseMaxLinks, resolved against base, which may be nil).
func parsePage(b []byte, base *url.URL) page {
	z := html.NewTokenizer(bytes.NewReader(b))
	var out, title, linkText strings.Builder
	var pg page
	skip, inTitle, inLink := 0, false, false
	linkHref := ""
	newline := func() {
		if out.Len() > 0 && !strings.HasSuffix(out.String(), "\n") {
			out.WriteByte('\n')
		}
	}
	word := func(sb *strings.Builder, t string) {
		if sb.Len() > 0 && !strings.HasSuffix(sb.String(), "\n") && !strings.HasSuffix(sb.String(), " ") {
			sb.WriteByte(' ')
		}
		sb.WriteString(t)
	}
	endLink := func() {
		if inLink && len(pg.links) < browseMaxLinks {
			pg.links = append(pg.links, pageLink{Text: strings.TrimSpace(linkText.String()), Href: linkHref})
		}
		inLink = false
		linkText.Reset()
	}
	for {
		tt := z.Next()
		switch tt {
		case html.ErrorToken:
			endLink()
			pg.title, pg.text = strings.Join(strings.Fields(title.String()), " "), collapseBlankLines(out.String())
			if pg.links == nil {
				pg.links = []pageLink{}
			}
			return pg
		case html.StartTagToken, html.SelfClosingTagToken:
			name, hasAttr := z.TagName()
			tag := string(name)
			switch {
			case tag == "title":
				inTitle = tt == html.StartTagToken
			case tag == "base" && hasAttr && base != nil:
				if h := attr(z, "href"); h != "" {
					if bu, err := base.Parse(h); err == nil {
						base = bu
					}
				}
			case skippedTags[tag]:
				if tt == html.StartTagToken {
					skip++
				}
			case tag == "a" && skip == 0:
				endLink()
				if h := strings.TrimSpace(attr(z, "href")); h != "" && !strings.HasPrefix(strings.ToLower(h), "javascript:") {
					if base != nil {
						if ru, err := base.Parse(h); err == nil {
							h = ru.String()
						}
					}
					inLink, linkHref = true, h
				}
			case blockTags[tag]:
				newline()
				if tag == "li" {
					out.WriteString("- ")
				}
			}
		case html.EndTagToken:
			name, _ := z.TagName()
			tag := string(name)
			switch {
			case tag == "title":
				inTitle = false
			case skippedTags[tag]:
				if skip > 0 {
					skip--
				}
			case tag == "a":
				endLink()
			case blockTags[tag] && tag != "br":
				newline()
			}
		case html.TextToken:
			if inTitle {
				title.Write(z.Text())
				continue
			}
			if skip > 0 {
				continue
			}
			t := strings.Join(strings.Fields(string(z.Text())), " ")
			if t == "" {
				continue
			}
			if !utf8.ValidString(t) {
				t = strings.ToValidUTF8(t, "\uFFFD")
			}
			word(&out, t)
			if inLink {
				word(&linkText, t)
			}
		}
	}
}

var blockTags = map[string]bool{"br": true, "p": true, "div": true, "li": true, "tr": true, "h1": true, "h2": true,
	"h3": true, "h4": true, "h5": true, "h6": true, "section": true, "article": true, "pre": true, "blockquote": true,
	"table": true, "ul": true, "ol": true, "header": true, "footer": true, "form": true, "main": true, "nav": true}

// attr is the value of the current tag's attribute key ("" when absent).
func attr(z *html.Tokenizer, key string) string {
	for {
		k, v, more := z.TagAttr()
		if string(k) == key {
			return string(v)
		}
		if !more {
			return ""
		}
	}
}

func (s *server) handleBrowse(w http.ResponseWriter, r *http.Request) error {
	var body BrowseRequest
	if err := decode(r, &body); err != nil {
		return err
	}
	res, err := s.computers.Browse(r.Context(), r.PathValue("id"), body)
	return reply(w, http.StatusOK, res, err)
}

// browseText is the browse result as the `browse` tool shows it to a model.
func browseText(r *BrowseResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "URL: %s\nStatus: %d\nContent-Type: %s\nTitle: %s\n", r.URL, r.Status, r.ContentType, r.Title)
	if r.Truncated {
		fmt.Fprintf(&b, "(truncated: %d of %d bytes read)\n", r.Bytes, r.TotalBytes)
	}
	b.WriteString("\n" + r.Text + "\n")
	if len(r.Links) > 0 {
		b.WriteString("\nLinks:\n")
		for _, l := range r.Links {
			fmt.Fprintf(&b, "- %s <%s>\n", l.Text, l.Href)
		}
	}
	return b.String()
}
