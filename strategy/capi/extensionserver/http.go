package extensionserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// hookServer is the webhook.Server under Cluster API's runtime extension
// server (sigs.k8s.io/cluster-api/exp/runtime/server): Cluster API's
// server registers its handlers on the embedded controller-runtime
// server's mux (Register, with controller-runtime's webhook metrics) and
// then calls Start, which here serves that mux from an http.Server whose
// limits are ours. controller-runtime's own server has no read, write or
// body limits (only a 32 s header timeout) and Cluster API's handlers
// buffer up to 20 MiB of body each, without a bound on how many at once.
type hookServer struct {
	webhook.Server
	limits  HTTPLimits
	host    string
	port    int
	certDir string
	tlsOpts []func(*tls.Config)
	log     logr.Logger
	// listening is set to the listener's address while it serves.
	listening *atomic.Pointer[string]
}

// Start serves the hooks until ctx ends.
func (s *hookServer) Start(ctx context.Context) error {
	cfg := &tls.Config{NextProtos: []string{"http/1.1"}}
	for _, op := range s.tlsOpts {
		op(cfg)
	}
	// HTTP/1.1 only, whatever the options said: HTTP/2 is not served
	// (TLSNextProto below), so it is not offered either.
	cfg.NextProtos = slices.DeleteFunc(slices.Clone(cfg.NextProtos), func(p string) bool { return p == "h2" })
	if len(cfg.NextProtos) == 0 {
		cfg.NextProtos = []string{"http/1.1"}
	}
	if cfg.GetCertificate == nil {
		w, err := certwatcher.New(filepath.Join(s.certDir, "tls.crt"), filepath.Join(s.certDir, "tls.key"))
		if err != nil {
			return err
		}
		cfg.GetCertificate = w.GetCertificate
		go func() {
			if err := w.Start(ctx); err != nil {
				s.log.Error(err, "certificate watcher")
			}
		}()
	}
	ln, err := tls.Listen("tcp", net.JoinHostPort(s.host, strconv.Itoa(s.port)), cfg)
	if err != nil {
		return err
	}
	if s.listening != nil {
		addr := ln.Addr().String()
		s.listening.Store(&addr)
		defer s.listening.Store(nil)
	}
	srv := s.limits.server(ctx, s.limits.handler(s.WebhookMux()))
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		// In-flight requests end within the write timeout.
		sctx, cancel := context.WithTimeout(context.Background(), s.limits.WriteTimeout+time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			_ = srv.Close()
		}
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	<-stopped
	return nil
}

// server is the http.Server of the hooks: HTTP/1.1 only, with the
// limits' timeouts and header bound.
func (l HTTPLimits) server(ctx context.Context, h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		WriteTimeout:      l.WriteTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
		// Not nil: no HTTP/2 (rapid reset, CVE-2023-44487, and stream
		// multiplexing past the concurrency limit).
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
		// TLS handshake errors and timeouts of strangers are not worth a
		// line each.
		ErrorLog: log.New(io.Discard, "", 0),
	}
}

// handler bounds what one request can make the server hold: a body
// announced larger than MaxRequestBytes is refused (413) before it is
// read, more than MaxConcurrent requests at once are refused (429), and a
// body that turns out larger than announced (or chunked) is read no
// further than MaxRequestBytes and answered 413.
func (l HTTPLimits) handler(next http.Handler) http.Handler {
	slots := make(chan struct{}, l.MaxConcurrent)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > l.MaxRequestBytes {
			tooLarge(w, l.MaxRequestBytes)
			return
		}
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
		default:
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Connection", "close")
			http.Error(w, "too many concurrent requests", http.StatusTooManyRequests)
			return
		}
		body := &limitedBody{ReadCloser: http.MaxBytesReader(w, r.Body, l.MaxRequestBytes)}
		r.Body = body
		next.ServeHTTP(&limitedWriter{ResponseWriter: w, body: body}, r)
	})
}

func tooLarge(w http.ResponseWriter, limit int64) {
	w.Header().Set("Connection", "close")
	http.Error(w, "request body larger than "+strconv.FormatInt(limit, 10)+" bytes", http.StatusRequestEntityTooLarge)
}

// limitedBody notes whether its reader refused a body past the limit or
// gave up on it at the read timeout.
type limitedBody struct {
	io.ReadCloser
	over, timedOut atomic.Bool
}

func (b *limitedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	var mbe *http.MaxBytesError
	var ne net.Error
	switch {
	case err == nil:
	case errors.As(err, &mbe):
		b.over.Store(true)
	case errors.As(err, &ne) && ne.Timeout():
		b.timedOut.Store(true)
	}
	return n, err
}

// limitedWriter answers 413 (body too large) or 408 (body not read within
// the read timeout) instead of the handler's status: Cluster API's
// handler answers such a request 200 with a Failure ("error reading
// request: ..."), which its client would take as the extension's answer.
type limitedWriter struct {
	http.ResponseWriter
	body  *limitedBody
	wrote bool
}

func (w *limitedWriter) WriteHeader(code int) {
	if w.wrote {
		return
	}
	w.wrote = true
	switch {
	case w.body.over.Load():
		code = http.StatusRequestEntityTooLarge
		w.ResponseWriter.Header().Set("Connection", "close")
	case w.body.timedOut.Load():
		code = http.StatusRequestTimeout
		w.ResponseWriter.Header().Set("Connection", "close")
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *limitedWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

// StartedChecker reports whether Start serves the hooks: nil once the
// server listens and completes a TLS handshake with its serving
// certificate (read from the certificate directory), an error before that,
// after Start returned, or while the certificate cannot be served. It is a
// controller-runtime healthz.Checker, for a readiness endpoint (/readyz),
// as controller-runtime's webhook server's StartedChecker is for a
// manager's. The check connects to the server itself; it does not verify
// the certificate's names or issuer, which are the clients' business.
func (s *Server) StartedChecker() healthz.Checker {
	return func(req *http.Request) error {
		addr := s.listening.Load()
		if addr == nil {
			return errors.New("the hook server is not serving")
		}
		host, port, err := net.SplitHostPort(*addr)
		if err != nil {
			return err
		}
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			host = "" // listening on every address: dial the local system
		}
		d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 10 * time.Second},
			// Only the handshake is checked: that a certificate is served.
			Config: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}} //nolint:gosec // a self-check of the handshake, not a client
		conn, err := d.DialContext(req.Context(), "tcp", net.JoinHostPort(host, port))
		if err != nil {
			return fmt.Errorf("the hook server does not complete a TLS handshake: %w", err)
		}
		return conn.Close()
	}
}
