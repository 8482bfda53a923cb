package sealed

import (
	"os"
	"testing"
)

func TestCheckSealedRefusesTheNamespaceItLeft(t *testing.T) {
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvSealedFrom, "1:"+self)
	if err := Check(); err == nil {
		t.Fatal("Check accepted the namespace named as the one left")
	}
	if _, ok := Current(); ok {
		t.Fatal("Current trusted a marker naming another parent")
	}
}
