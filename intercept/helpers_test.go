package intercept

import (
	"fmt"
	"time"
)

func sprint(v any) string { return fmt.Sprintf("%v %+v %#v", v, v, v) }

func waitABit() { time.Sleep(20 * time.Millisecond) }
