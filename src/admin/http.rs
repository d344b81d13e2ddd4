//! The admin endpoint's HTTP: which route a request head asks for, and the
//! bytes of an answer.

/// What an HTTP request on the admin socket asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    /// `GET /metrics`.
    Metrics,
    /// `GET /stats`.
    Stats,
    /// Any other path: 404.
    NotFound,
    /// `/metrics` or `/stats` with a method other than GET: 405.
    MethodNotAllowed,
}

/// What parsing the buffered bytes found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Head {
    /// Not a whole head yet.
    Partial,
    /// A request for `Route`.
    Request(Route),
    /// Not HTTP: answer 400.
    Malformed,
}

/// Parses a request head at the start of `buf`.
pub(crate) fn parse_head(buf: &[u8]) -> Head {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Partial) => Head::Partial,
        Err(_) => Head::Malformed,
        Ok(httparse::Status::Complete(_)) => {
            let (Some(method), Some(target)) = (req.method, req.path) else {
                return Head::Malformed;
            };
            let path = target.split('?').next().unwrap_or_default();
            let route = match path {
                "/metrics" => Route::Metrics,
                "/stats" => Route::Stats,
                _ => return Head::Request(Route::NotFound),
            };
            Head::Request(if method == "GET" {
                route
            } else {
                Route::MethodNotAllowed
            })
        }
    }
}

/// A complete response that closes the connection.
pub(crate) fn response(status: u16, content_type: &str, body: &[u8]) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Error",
    };
    let allow = if status == 405 { "Allow: GET\r\n" } else { "" };
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{allow}Cache-Control: no-store\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// A plain-text error answer.
pub(crate) fn error(status: u16, text: &str) -> Vec<u8> {
    response(
        status,
        "text/plain; charset=utf-8",
        format!("{text}\n").as_bytes(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        for (req, want) in [
            (
                "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
                Head::Request(Route::Metrics),
            ),
            (
                "GET /metrics?name[]=x HTTP/1.0\r\n\r\n",
                Head::Request(Route::Metrics),
            ),
            ("GET /stats HTTP/1.1\r\n\r\n", Head::Request(Route::Stats)),
            (
                "POST /stats HTTP/1.1\r\n\r\n",
                Head::Request(Route::MethodNotAllowed),
            ),
            (
                "GET /other HTTP/1.1\r\n\r\n",
                Head::Request(Route::NotFound),
            ),
            ("DELETE / HTTP/1.1\r\n\r\n", Head::Request(Route::NotFound)),
            ("GET /metrics HTTP/1.1\r\nHost: x\r\n", Head::Partial),
            ("\x16\x03\x01 junk\r\n\r\n", Head::Malformed),
        ] {
            assert_eq!(parse_head(req.as_bytes()), want, "{req:?}");
        }
    }

    #[test]
    fn a_head_split_anywhere_is_partial_until_whole() {
        let req = b"GET /stats HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n";
        for cut in 0..req.len() {
            assert_eq!(parse_head(&req[..cut]), Head::Partial, "cut at {cut}");
        }
        assert_eq!(parse_head(req), Head::Request(Route::Stats));
    }

    #[test]
    fn responses_close_and_say_their_length() {
        let r = String::from_utf8(error(405, "GET only")).unwrap();
        assert!(r.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"), "{r}");
        assert!(r.contains("\r\nAllow: GET\r\n"));
        assert!(r.contains("\r\nConnection: close\r\n"));
        assert!(r.ends_with("\r\n\r\nGET only\n"));
        assert!(r.contains("Content-Length: 9\r\n"));
    }
}
