package worker

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/nsgate/nsgate/sandbox"
)

// nssFiles are an NSS sql database's files (cert9.db, key4.db,
// pkcs11.txt).
var nssFiles = []string{"cert9.db", "key4.db", "pkcs11.txt"}

// nssDB builds an NSS database trusting caPEM as a CA for TLS servers, with
// certutil (Debian's libnss3-tools), and returns its files as home files
// at .pki/nssdb: where Chromium, Playwright's Chromium and other NSS
// programs read their user trust. Without certutil it returns an error;
// the caller warns (such a browser then fails closed on terminated hosts).
func nssDB(caPEM []byte) ([]sandbox.HomeFile, error) {
	certutil, err := exec.LookPath("certutil")
	if err != nil {
		return nil, fmt.Errorf("certutil not found (Debian package libnss3-tools): browsers in the worker will not trust the run's CA")
	}
	dir, err := os.MkdirTemp("", "nsgate-nssdb-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, caPEM, 0o600); err != nil {
		return nil, err
	}
	db := "sql:" + dir
	for _, args := range [][]string{
		{"-N", "-d", db, "--empty-password"},
		{"-A", "-d", db, "-n", "nsgate run CA", "-t", "C,,", "-i", ca},
	} {
		if out, err := exec.Command(certutil, args...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("certutil %s: %v: %s", args[0], err, out)
		}
	}
	var files []sandbox.HomeFile
	for _, n := range nssFiles {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return nil, fmt.Errorf("nss database: %w", err)
		}
		files = append(files, sandbox.HomeFile{Rel: ".pki/nssdb/" + n, Data: b})
	}
	return files, nil
}
