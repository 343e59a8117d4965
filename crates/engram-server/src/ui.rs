//! The memory inspector: a web page at `/ui/` on the API's own port, to see and correct what
//! is remembered.
//!
//! The page is plain HTML, CSS and JavaScript modules (no build step, no framework), embedded
//! in the binary here, so `cargo build` alone makes a working page and nothing is fetched at
//! run time (no CDN, no web fonts). It uses only the public REST API, with the token the
//! person signs in with; serving it needs no token (it holds no data).

use axum::Router;
use std::sync::OnceLock;

use crate::extract::PathParam;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

/// One file of the page.
struct Asset {
    path: &'static str,
    content_type: &'static str,
    body: &'static str,
}

macro_rules! asset {
    ($path:literal, $type:expr) => {
        Asset {
            path: $path,
            content_type: $type,
            body: include_str!(concat!("../ui/", $path)),
        }
    };
}

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// Every file of the page (a test checks this matches the `ui/` folder).
const ASSETS: &[Asset] = &[
    asset!("index.html", HTML),
    asset!("style.css", CSS),
    asset!("app.js", JS),
    asset!("api.js", JS),
    asset!("dom.js", JS),
    asset!("views/parts.js", JS),
    asset!("views/profile.js", JS),
    asset!("views/search.js", JS),
    asset!("views/timeline.js", JS),
    asset!("views/memory.js", JS),
    asset!("views/graph.js", JS),
    asset!("views/sessions.js", JS),
    asset!("views/transfer.js", JS),
];

/// What the page may load and talk to: itself only. Styles set from scripts go through the
/// CSSOM, which this policy allows; no inline script or style attribute is needed.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; \
     frame-ancestors 'none'";

/// The routes of the page: `/ui` (sends to `/ui/`), `/ui/` and its files.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
        .route(
            "/ui/",
            get(|headers: HeaderMap| async move { serve("index.html", &headers) }),
        )
        .route(
            "/ui/{*path}",
            get(
                |PathParam(path): PathParam<String>, headers: HeaderMap| async move {
                    serve(&path, &headers)
                },
            ),
        )
}

/// A validator for a file's content (FNV-1a, 64 bits): the browser revalidates every load and
/// gets `304 Not Modified` while the binary is the same.
fn etag(body: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in body.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("\"{hash:016x}\"")
}

fn serve(path: &str, request: &HeaderMap) -> Response {
    static TAGS: OnceLock<Vec<String>> = OnceLock::new();
    let tags = TAGS.get_or_init(|| ASSETS.iter().map(|a| etag(a.body)).collect());
    let Some((asset, tag)) = ASSETS.iter().zip(tags).find(|(a, _)| a.path == path) else {
        return (
            StatusCode::NOT_FOUND,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            )],
            format!("the inspector has no file '{path}'; open /ui/"),
        )
            .into_response();
    };
    let tag_value = HeaderValue::from_str(tag).unwrap_or(HeaderValue::from_static("\"\""));
    let unchanged = request
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == tag));
    if unchanged {
        return (
            StatusCode::NOT_MODIFIED,
            [
                (header::ETAG, tag_value),
                (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            ],
        )
            .into_response();
    }
    let mut response = (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static(asset.content_type),
            ),
            (header::ETAG, tag_value),
            // Revalidate every time: the binary may have been upgraded under the same URL.
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            (
                header::REFERRER_POLICY,
                HeaderValue::from_static("no-referrer"),
            ),
        ],
        asset.body,
    )
        .into_response();
    if asset.content_type == HTML {
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        );
        headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
        headers.insert(
            HeaderName::from_static("cross-origin-opener-policy"),
            HeaderValue::from_static("same-origin"),
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file in `ui/` is served, with the type its extension says.
    #[test]
    fn every_file_of_the_page_is_embedded() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("ui");
        let mut on_disk = Vec::new();
        let mut dirs = vec![root.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else {
                    let relative = path.strip_prefix(&root).unwrap();
                    on_disk.push(relative.to_string_lossy().replace('\\', "/"));
                }
            }
        }
        on_disk.sort();
        let mut embedded: Vec<String> = ASSETS.iter().map(|a| a.path.to_string()).collect();
        embedded.sort();
        assert_eq!(on_disk, embedded);
        for asset in ASSETS {
            let expected = match asset.path.rsplit('.').next() {
                Some("html") => HTML,
                Some("js") => JS,
                Some("css") => CSS,
                other => panic!("unexpected file type {other:?}"),
            };
            assert_eq!(asset.content_type, expected, "{}", asset.path);
        }
    }

    /// Every module is preloaded by the page, so the browser fetches them all at once.
    #[test]
    fn every_module_is_preloaded() {
        let html = ASSETS.iter().find(|a| a.path == "index.html").unwrap().body;
        for asset in ASSETS
            .iter()
            .filter(|a| a.content_type == JS && a.path != "app.js")
        {
            assert!(
                html.contains(&format!(
                    "<link rel=\"modulepreload\" href=\"{}\">",
                    asset.path
                )),
                "index.html does not preload {}",
                asset.path
            );
        }
    }

    /// The page's modules import only files that are served.
    #[test]
    fn every_import_is_served() {
        for asset in ASSETS.iter().filter(|a| a.content_type == JS) {
            let dir = asset.path.rsplit_once('/').map_or("", |(d, _)| d);
            for line in asset.body.lines() {
                let line = line.trim_start();
                if !line.starts_with("import ") && !line.starts_with("} from ") {
                    continue;
                }
                let Some(rest) = line.split(" from '").nth(1) else {
                    continue;
                };
                let target = rest.split('\'').next().unwrap();
                let mut parts: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
                for piece in target.split('/') {
                    match piece {
                        "." => {}
                        ".." => {
                            parts.pop();
                        }
                        other => parts.push(other),
                    }
                }
                let resolved = parts.join("/");
                assert!(
                    ASSETS.iter().any(|a| a.path == resolved),
                    "{} imports {target} ({resolved}), which is not served",
                    asset.path
                );
            }
        }
    }
}
