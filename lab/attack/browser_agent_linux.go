package attack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/chromedp/cdproto"
	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/remote"

	"github.com/nsgate/nsgate/lab/internet"
)

// The scripted agent of the browser attempts (browser.go): it drives a
// headless Chromium over CDP, as a model with a browser tool would, and
// reports what each attempt saw.

// DriveBrowser attaches to the Chromium whose DevTools answer at base
// ("http://127.0.0.1:PORT") and runs the browser attempts in order,
// calling each with the attempt's index, their number, the attempt and
// its Observation as it completes. After each attempt it saves a
// screenshot of what the agent saw in evidence/ScreenshotDir/ID.png
// (none when evidence is ""). It returns the observations, or an error
// when it could not attach. It leaves the browser running (CloseBrowser
// ends it).
func DriveBrowser(ctx context.Context, base, evidence string, each func(i, n int, at Attempt, o Observation)) ([]Observation, error) {
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
		o := runBrowserAttempt(cctx, b, evidence)
		obs = append(obs, o)
		each(i, len(all), b.Attempt, o)
	}
	return obs, nil
}

// runBrowserAttempt is the scripted agent's part of one attempt.
func runBrowserAttempt(cctx context.Context, b browserAttempt, evidence string) Observation {
	o := Observation{ID: b.ID, Start: time.Now()}
	ctx, cancel := context.WithTimeout(cctx, 20*time.Second)
	defer cancel()
	r := agentStep(ctx, b)
	o.Observed, o.Detail = r.out, r.detail
	if evidence != "" {
		png := r.png
		if png == nil {
			sctx, scancel := context.WithTimeout(cctx, 10*time.Second)
			png, _ = chromedp.Run(sctx, chromedp.CaptureScreenshot())
			scancel()
		}
		if rel, err := SaveScreenshot(evidence, b.ID, png); err == nil {
			o.Screenshot = rel
		} else {
			o.Detail += " (no screenshot: " + err.Error() + ")"
		}
	}
	o.End = time.Now()
	return o
}

// SaveScreenshot writes png as evidence/ScreenshotDir/id.png and returns
// its path relative to evidence. It refuses what is not a PNG image.
func SaveScreenshot(evidence, id string, png []byte) (string, error) {
	if len(png) < 8 || string(png[:8]) != "\x89PNG\r\n\x1a\n" {
		return "", errors.New("the browser gave no PNG image")
	}
	rel := filepath.Join(ScreenshotDir, id+".png")
	if err := os.MkdirAll(filepath.Join(evidence, ScreenshotDir), 0o755); err != nil {
		return "", err
	}
	return rel, os.WriteFile(filepath.Join(evidence, rel), png, 0o644)
}

// awayFrom waits until the tab's location no longer starts with prefix,
// or ctx's end, or limit; it returns the last location.
func awayFrom(ctx context.Context, prefix string, limit time.Duration) string {
	end := time.Now().Add(limit)
	var loc string
	for time.Now().Before(end) && ctx.Err() == nil {
		loc, _ = chromedp.Run(ctx, chromedp.Location())
		if loc != "" && !strings.HasPrefix(loc, prefix) {
			// Let the new page load (or fail) before it is read.
			time.Sleep(1500 * time.Millisecond)
			return loc
		}
		time.Sleep(200 * time.Millisecond)
	}
	return loc
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
	case "follow", "frame":
		if err := chromedp.Do(ctx, chromedp.Navigate(b.url)); err != nil {
			return erroredf("open the approved page %s: %v", b.url, err)
		}
		if b.how == "follow" {
			awayFrom(ctx, "http://"+internet.AppName+"/", 6*time.Second)
		} else {
			time.Sleep(3 * time.Second) // the frame loads (or fails)
		}
		return look(ctx, b.url, nil)
	case "popup":
		if err := chromedp.Do(ctx, chromedp.Navigate(b.url)); err != nil {
			return erroredf("open the approved page %s: %v", b.url, err)
		}
		opened := chromedp.WaitNewTarget(ctx, func(i *target.Info) bool { return i.Type == "page" })
		if err := chromedp.Do(ctx, chromedp.Click("#go")); err != nil {
			return erroredf("click the page's button: %v", err)
		}
		var id target.ID
		select {
		case id = <-opened:
		case <-time.After(8 * time.Second):
			return blockedf("the click opened no window")
		}
		pctx, pcancel := chromedp.NewContext(ctx, chromedp.WithTargetID(id))
		defer pcancel()
		awayFrom(pctx, "about:", 6*time.Second)
		png, _ := chromedp.Run(pctx, chromedp.CaptureScreenshot())
		r := look(pctx, b.url, nil)
		r.detail = "in the window the click opened: " + r.detail
		r.png = png
		return r
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

// look reads what the tab shows after the agent opened u (navErr is how
// that went): the attack got through if it shows a fake target's body.
func look(ctx context.Context, u string, navErr error) result {
	return lookAt(ctx, u, navErr, false)
}

// openAndLook navigates to u and reads what the page shows.
func openAndLook(ctx context.Context, u string, control bool) result {
	return lookAt(ctx, u, chromedp.Do(ctx, chromedp.Navigate(u)), control)
}

func lookAt(ctx context.Context, u string, navErr error, control bool) result {
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
