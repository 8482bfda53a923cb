// Command h3get is the integration tests' HTTP/3 client: run as the worker
// under `nsgate run`, it fetches one URL over QUIC and prints the body. It
// is test code: the nsgate binary never links a QUIC stack.
//
//	h3get [-ca FILE] [-sni NAME] [-timeout D] URL
//
// -sni sends NAME as the TLS server name whatever host the URL names (a
// client that lies to the gateway). Exit 0 and the body on stdout, or 1
// and "error: ..." when the fetch failed.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

func main() {
	ca := flag.String("ca", "", "PEM file of the CA to trust")
	sni := flag.String("sni", "", "TLS server name to send instead of the URL's host")
	timeout := flag.Duration("timeout", 10*time.Second, "bound on the whole fetch")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: h3get [-ca FILE] [-sni NAME] [-timeout D] URL")
		os.Exit(2)
	}
	os.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true")
	if err := get(flag.Arg(0), *ca, *sni, *timeout); err != nil {
		fmt.Printf("error: %v\n", err)
		os.Exit(1)
	}
}

func get(url, caFile, sni string, timeout time.Duration) error {
	cfg := &tls.Config{ServerName: sni}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return err
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return fmt.Errorf("%s: no certificate", caFile)
		}
	}
	tr := &http3.Transport{
		TLSClientConfig: cfg,
		QUICConfig:      &quic.Config{HandshakeIdleTimeout: timeout / 2},
	}
	defer tr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return err
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	fmt.Printf("%s %d\n%s", resp.Proto, resp.StatusCode, body)
	return nil
}
