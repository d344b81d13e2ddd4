/* portcullis: a sandbox egress proxy, embedded through its C ABI.
 * See docs/embedding-c.md. Every function returns at once unless it
 * says it waits; every pointer's ownership is stated on it. */

#ifndef PORTCULLIS_H
#define PORTCULLIS_H

/* Generated from src/capi by cbindgen: do not edit. Regenerate with
 * `PORTCULLIS_BLESS=1 cargo test --test it -- cabi::header`. */

#include <stddef.h>
#include <stdint.h>

/**
 * What a `portcullis_` function returned. Every value but
 * `PORTCULLIS_STATUS_OK` comes with a message: call `portcullis_last_error`
 * on the same thread.
 */
typedef enum PortcullisStatus {
  /**
   * Success.
   */
  PORTCULLIS_STATUS_OK = 0,
  /**
   * A required pointer was NULL, a string was not UTF-8, or an index was
   * out of range.
   */
  PORTCULLIS_STATUS_INVALID_ARGUMENT = 1,
  /**
   * The configuration, the policy or a rule did not parse or validate;
   * the message names the key (or the rule) and the fix.
   */
  PORTCULLIS_STATUS_CONFIG = 2,
  /**
   * The operating system refused: binding a listener, reading the
   * configuration file, starting a thread.
   */
  PORTCULLIS_STATUS_IO = 3,
  /**
   * The proxy has stopped (`portcullis_stop`), or its reactor exited.
   */
  PORTCULLIS_STATUS_NOT_RUNNING = 4,
  /**
   * The proxy refused the request and changed nothing; the message says why.
   */
  PORTCULLIS_STATUS_REFUSED = 5,
  /**
   * A bug in portcullis: it panicked. The message has the panic's text;
   * please report it. The proxy may be unusable, but freeing it is safe.
   */
  PORTCULLIS_STATUS_PANIC = 6,
} PortcullisStatus;

/**
 * A running proxy: its reactor runs on a thread of its own
 * (`portcullis-reactor`).
 *
 * Made by `portcullis_start`, `portcullis_start_toml` or
 * `portcullis_start_file`; owned by the caller, who frees it with
 * `portcullis_free` exactly once. Every other function may be called on
 * it from any thread, concurrently.
 */
typedef struct PortcullisProxy PortcullisProxy;

/**
 * The event callback: `user_data` as given to `portcullis_subscribe`, and
 * one event as a JSON object (the fields of the JSON log line: `event` is
 * `"session"` or `"request"`, then `conn`, `client`, `target`, `decision`,
 * `rule`, `reason`, `bytes_up`, `bytes_down`, `close`, ... as they apply).
 *
 * It runs on the proxy's `portcullis-evt` thread, never on the reactor
 * and with no portcullis lock held. Ownership: `event_json` belongs to
 * portcullis and is valid only during the call; copy it to keep it.
 */
typedef void (*PortcullisEventCallback)(void *user_data, const char *event_json);

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

/**
 * Starts a proxy listening on `listen` (`"127.0.0.1:0"` picks a free
 * port; `"unix:/path"` a Unix socket), speaking HTTP and SOCKS5, with a
 * policy of the given rules (the syntax of the `--allow` and `--deny`
 * flags: `HOST[:PORT|:LO-HI]` or `CIDR[:PORT|:LO-HI]`, e.g.
 * `"api.example.com:443"`, `"127.0.0.1:8080"`). Deny rules win. With no
 * allow rule everything is refused. Everything else is the default
 * configuration.
 *
 * Ownership: `listen`, `allow`, `deny` and their strings are only read
 * during the call (the caller keeps them). `allow` (`deny`) may be NULL
 * when `allow_len` (`deny_len`) is 0. On success `*out` is a proxy the
 * caller owns and frees with `portcullis_free`; on failure `*out` is NULL.
 *
 * # Safety
 * Every non-NULL pointer is valid as described; `out` is valid to write.
 */
enum PortcullisStatus portcullis_start(const char *listen,
                                       const char *const *allow,
                                       size_t allow_len,
                                       const char *const *deny,
                                       size_t deny_len,
                                       struct PortcullisProxy **out);

/**
 * Starts a proxy from a TOML configuration (the format of
 * `portcullis --config`: listeners, `[[rules]]`, limits, timeouts, ...).
 * A configuration with no `[[rules]]` refuses everything.
 *
 * Ownership: `toml` is only read during the call. On success `*out` is a
 * proxy the caller owns and frees with `portcullis_free`; on failure
 * `*out` is NULL.
 *
 * # Safety
 * `toml` is a NUL-terminated string; `out` is valid to write.
 */
enum PortcullisStatus portcullis_start_toml(const char *toml, struct PortcullisProxy **out);

/**
 * Starts a proxy from a TOML configuration file (as `portcullis --config
 * PATH`; relative paths in it are taken from the file's directory).
 *
 * Ownership: `path` is only read during the call. On success `*out` is a
 * proxy the caller owns and frees with `portcullis_free`; on failure
 * `*out` is NULL.
 *
 * # Safety
 * `path` is a NUL-terminated string; `out` is valid to write.
 */
enum PortcullisStatus portcullis_start_file(const char *path, struct PortcullisProxy **out);

/**
 * The bound address of listener `index` (0 is the first, in configuration
 * order), its port resolved: `"127.0.0.1:40123"`, `"[::1]:8080"`, or
 * `"unix:/path"`. `PORTCULLIS_STATUS_INVALID_ARGUMENT` past the last one.
 *
 * Ownership: on success `*out` is a new string the caller owns and frees
 * with `portcullis_string_free`; on failure `*out` is NULL.
 *
 * # Safety
 * `proxy` is a live proxy; `out` is valid to write.
 */
enum PortcullisStatus portcullis_local_addr(const struct PortcullisProxy *proxy,
                                            size_t index,
                                            char **out);

/**
 * The counters as one JSON object, as the admin endpoint's `GET /stats`
 * answers (`accepted`, `allowed`, `denied`, `open`, `closed`, `bytes_up`,
 * `bytes_down`, `by_rule`, `workers`, ...), plus `events_dropped`: events
 * the subscriber's callback fell too far behind to receive.
 *
 * Ownership: on success `*out` is a new string the caller owns and frees
 * with `portcullis_string_free`; on failure `*out` is NULL.
 *
 * # Safety
 * `proxy` is a live proxy; `out` is valid to write.
 */
enum PortcullisStatus portcullis_stats_json(const struct PortcullisProxy *proxy, char **out);

/**
 * Replaces the policy with a TOML policy document (its `[[rules]]`, and
 * the top-level `mode = "audit"` and `default = true`; other keys are
 * ignored, so a whole configuration file works). Returns once the new
 * policy is in force: a connection made afterwards gets it; open tunnels
 * it no longer allows are closed (reason `policy-reload`). On an error
 * nothing changes.
 *
 * Ownership: `policy_toml` is only read during the call.
 *
 * # Safety
 * `proxy` is a live proxy; `policy_toml` a NUL-terminated string.
 */
enum PortcullisStatus portcullis_replace_policy(const struct PortcullisProxy *proxy,
                                                const char *policy_toml);

/**
 * Subscribes `callback` to the proxy's events: one call per session (at
 * its close) and per inspected HTTP request, with the event as JSON. It
 * replaces any earlier callback; NULL unsubscribes. When this returns, the
 * previous callback is not running and will not be called again (unless
 * this is called from inside it).
 *
 * Thread: the callback runs on a thread the proxy starts for it, named
 * `portcullis-evt` (one per proxy, started by the first subscription),
 * one event at a time in the order they happened; never on the reactor,
 * and with no portcullis lock held: it may call any `portcullis_`
 * function on this proxy (`portcullis_stats_json`,
 * `portcullis_replace_policy`, `portcullis_stop`...) except
 * `portcullis_free`. A slow callback does not slow the proxy: beyond 4096
 * waiting events the newest are dropped and counted (`events_dropped` in
 * `portcullis_stats_json`). Events only flow while subscribed.
 *
 * Ownership: `user_data` stays the caller's; portcullis only passes it to
 * `callback`, on the events thread, until the callback is replaced or the
 * proxy is stopped or freed.
 *
 * # Safety
 * `proxy` is a live proxy; `callback` is NULL or a function safe to call
 * from another thread with `user_data`.
 */
enum PortcullisStatus portcullis_subscribe(const struct PortcullisProxy *proxy,
                                           PortcullisEventCallback callback,
                                           void *user_data);

/**
 * Stops the proxy and waits for it: with `graceful` non-zero, listeners
 * close at once and open sessions may finish within `timeouts.drain`;
 * with 0 every session is closed now. Then the events still queued are
 * delivered, and the events thread ends. Stopping a stopped proxy
 * returns `PORTCULLIS_STATUS_OK`. Called from two threads, both return
 * once the proxy has stopped; an immediate stop cuts a graceful one
 * short. The proxy must still be freed.
 *
 * # Safety
 * `proxy` is a live proxy.
 */
enum PortcullisStatus portcullis_stop(const struct PortcullisProxy *proxy, int32_t graceful);

/**
 * Stops the proxy at once if it is running (as `portcullis_stop(proxy,
 * 0)`) and frees it. NULL is ignored. After this `proxy` is invalid; do
 * not call it from the event callback.
 *
 * # Safety
 * `proxy` is NULL or a live proxy, not used again after this call.
 */
void portcullis_free(struct PortcullisProxy *proxy);

/**
 * Frees a string portcullis handed out (`portcullis_local_addr`,
 * `portcullis_stats_json`). NULL is ignored.
 *
 * # Safety
 * `s` is NULL or a string from portcullis not yet freed.
 */
void portcullis_string_free(char *s);

/**
 * The library's version (`"0.1.0"`).
 *
 * Ownership: a static string; do not free it.
 */
const char *portcullis_version(void);

/**
 * The message of the last failed `portcullis_` call on this thread, or
 * NULL if the last call succeeded (every call clears it first).
 *
 * Ownership: the string belongs to portcullis and stays valid until the
 * next `portcullis_` call on this thread; copy it to keep it. Do not free it.
 */
const char *portcullis_last_error(void);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* PORTCULLIS_H */
