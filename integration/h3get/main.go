// Command h3get is the integration tests' HTTP/3 client: run as the worker
// under `nsgate run`, it fetches one URL over QUIC and prints the body. It
// is test code: the nsgate binary never links a QUIC stack.
//
//	h3get [-ca FILE] [-sni NAME] [-then-sni NAME] [-timeout D] URL
//
// -sni sends NAME as the TLS server name whatever host the URL names (a
// client that lies to the gateway). Exit 0 and the body on stdout, or 1
// and "error: ..." when the fetch failed. With -then-sni, after the fetch
// it opens a second QUIC connection on the same UDP socket (the same
// 5-tuple), naming NAME, fetches the URL again over it and prints
// "second: " and the status line or the error; the exit status is the
// first fetch's.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

func main() {
	ca := flag.String("ca", "", "PEM file of the CA to trust")
	sni := flag.String("sni", "", "TLS server name to send instead of the URL's host")
	thenSNI := flag.String("then-sni", "", "after the fetch, a second connection on the same socket naming this")
	timeout := flag.Duration("timeout", 10*time.Second, "bound on the whole fetch")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: h3get [-ca FILE] [-sni NAME] [-then-sni NAME] [-timeout D] URL")
		os.Exit(2)
	}
	os.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true")
	// One UDP socket for every connection, so that a second one has the
	// first one's 5-tuple.
	pc, err := net.ListenUDP("udp", nil)
	if err != nil {
		fmt.Printf("error: %v\n", err)
		os.Exit(1)
	}
	qt := &quic.Transport{Conn: pc}
	defer qt.Close()
	status, body, err := get(qt, flag.Arg(0), *ca, *sni, *timeout)
	if err != nil {
		fmt.Printf("error: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("%s\n%s", status, body)
	if *thenSNI != "" {
		status, _, err := get(qt, flag.Arg(0), *ca, *thenSNI, *timeout)
		if err != nil {
			status = fmt.Sprintf("error: %v", err)
		}
		fmt.Printf("\nsecond: %s\n", status)
	}
}

// get fetches url over a new QUIC connection on qt and returns the
// response's status line ("HTTP/3.0 200") and body.
func get(qt *quic.Transport, url, caFile, sni string, timeout time.Duration) (string, []byte, error) {
	cfg := &tls.Config{ServerName: sni}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return "", nil, err
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return "", nil, fmt.Errorf("%s: no certificate", caFile)
		}
	}
	tr := &http3.Transport{
		TLSClientConfig: cfg,
		QUICConfig:      &quic.Config{HandshakeIdleTimeout: timeout / 2},
		Dial: func(ctx context.Context, addr string, tlsCfg *tls.Config, cfg *quic.Config) (*quic.Conn, error) {
			ua, err := net.ResolveUDPAddr("udp", addr)
			if err != nil {
				return nil, err
			}
			return qt.DialEarly(ctx, ua, tlsCfg, cfg)
		},
	}
	defer tr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return "", nil, err
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return "", nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("%s %d", resp.Proto, resp.StatusCode), body, nil
}
