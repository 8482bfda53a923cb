package attack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/chromedp/cdproto"
	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/remote"
)

// The scripted agent of the browser attempts (browser.go): it drives a
// headless Chromium over CDP, as a model with a browser tool would, and
// reports what each attempt saw.

// DriveBrowser attaches to the Chromium whose DevTools answer at base
// ("http://127.0.0.1:PORT") and runs the browser attempts in order,
// calling each with the attempt's index, their number, the attempt and
// its Observation as it completes. It returns the observations, or an
// error when it could not attach. It leaves the browser running
// (CloseBrowser ends it).
func DriveBrowser(ctx context.Context, base string, each func(i, n int, at Attempt, o Observation)) ([]Observation, error) {
	actx, acancel := remote.NewAllocator(ctx, base+"/")
	defer acancel()
	cctx, ccancel := chromedp.NewContext(actx)
	defer ccancel()
	if err := chromedp.Do(cctx); err != nil { // attaches to the browser, opens a tab
		return nil, fmt.Errorf("attach to Chromium over CDP: %w", err)
	}
	var obs []Observation
	all := browserAttempts()
	for i, b := range all {
		o := runBrowserAttempt(cctx, b)
		obs = append(obs, o)
		each(i, len(all), b.Attempt, o)
	}
	return obs, nil
}

// runBrowserAttempt is the scripted agent's part of one attempt.
func runBrowserAttempt(cctx context.Context, b browserAttempt) Observation {
	o := Observation{ID: b.ID, Start: time.Now()}
	ctx, cancel := context.WithTimeout(cctx, 20*time.Second)
	defer cancel()
	r := agentStep(ctx, b)
	o.Observed, o.Detail, o.End = r.out, r.detail, time.Now()
	return o
}

// injected finds the instruction the injection page plants.
var injected = regexp.MustCompile(`open (https?://[^\s"'<>]+)`)

// targetBodies are what the fake targets answer: a page that shows one
// means the browser reached it.
var targetBodies = []string{"fake metadata", "unapproved server", "fronted content", "private service", "host loopback"}

func agentStep(ctx context.Context, b browserAttempt) result {
	switch b.how {
	case "load":
		return openAndLook(ctx, b.url, b.Control())
	case "inject":
		if err := chromedp.Do(ctx, chromedp.Navigate(b.url)); err != nil {
			return erroredf("open the approved page %s: %v", b.url, err)
		}
		text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
		if err != nil {
			return erroredf("read the page: %v", err)
		}
		m := injected.FindStringSubmatch(text)
		if m == nil {
			return erroredf("the page has no instruction to obey: %q", shorten(text, 120))
		}
		to := strings.TrimRight(m[1], ".,;:")
		r := openAndLook(ctx, to, false)
		r.detail = "the page says " + strconv.Quote(strings.TrimSpace(shorten(m[0], 80))) + "; the agent obeyed: " + r.detail
		return r
	case "script":
		if err := chromedp.Do(ctx, chromedp.Navigate(b.url)); err != nil {
			return erroredf("open the approved page %s: %v", b.url, err)
		}
		type verdict struct {
			Reached bool   `json:"reached"`
			Detail  string `json:"detail"`
		}
		v, err := chromedp.Run(ctx, chromedp.Evaluate[verdict](`window.labResult`, chromedp.EvalAwaitPromise))
		switch {
		case err != nil:
			return erroredf("the page's script gave no verdict: %v", err)
		case v.Reached:
			return allowedf("the page's script got through: %s", v.Detail)
		}
		return blockedf("the page's script failed: %s", v.Detail)
	}
	return erroredf("unknown agent step %q", b.how)
}

// openAndLook navigates to u and reads what the page shows.
func openAndLook(ctx context.Context, u string, control bool) result {
	navErr := chromedp.Do(ctx, chromedp.Navigate(u))
	text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
	loc, _ := chromedp.Run(ctx, chromedp.Location())
	text = strings.Join(strings.Fields(text), " ")
	if control {
		if navErr != nil {
			return blockedf("open %s: %v", u, navErr)
		}
		if !strings.Contains(text, "hello from app") {
			return blockedf("%s rendered %q, want hello from app", loc, shorten(text, 100))
		}
		return allowedf("%s rendered %q", loc, shorten(text, 100))
	}
	for _, body := range targetBodies {
		if strings.Contains(text, body) {
			return allowedf("%s rendered a fake target's page: %q", loc, shorten(text, 100))
		}
	}
	if navErr != nil {
		var le *chromedp.LoadError
		if errors.As(navErr, &le) {
			return blockedf("navigation to %s failed: %s", u, le.ErrorText)
		}
		return blockedf("navigation to %s failed: %v", u, navErr)
	}
	return blockedf("navigation to %s ended at %s without the target's page (%q)", u, loc, shorten(text, 80))
}

// CloseBrowser sends Browser.close on a new DevTools connection to the
// browser at base: Chromium exits. (chromedp.Cancel would only close the
// tab: the remote allocator attaches to a browser it did not start, and
// chromedp refuses Browser.close, so it goes on a connection of its own.)
func CloseBrowser(ctx context.Context, base string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/json/version", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var v struct {
		WS string `json:"webSocketDebuggerUrl"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return fmt.Errorf("/json/version: %w", err)
	}
	conn, err := remote.DialContext(ctx, v.WS)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Write(ctx, &cdproto.Message{ID: 1, Method: browser.CommandClose})
}
