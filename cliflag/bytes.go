package cliflag

import (
	"errors"
	"strconv"
	"strings"
)

// ParseBytes reads a size: digits, then optionally K, M, G or T (powers of
// 1024, with or without a following "iB" or "B").
func ParseBytes(s string) (int64, error) {
	num := strings.TrimRight(s, "KMGTkmgtiB")
	unit := strings.ToUpper(strings.TrimSuffix(strings.TrimSuffix(s[len(num):], "B"), "i"))
	shift := map[string]uint{"": 0, "K": 10, "M": 20, "G": 30, "T": 40}
	sh, ok := shift[unit]
	if !ok || num == "" {
		return 0, errors.New("want a number of bytes with an optional K, M, G or T")
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<62)>>sh {
		return 0, errors.New("want a number of bytes with an optional K, M, G or T")
	}
	return n << sh, nil
}
