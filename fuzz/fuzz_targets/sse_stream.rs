//! The event-stream decoder the model clients read answers with, fed in chunks of any size.
#![no_main]

use engram_llm::sse::SseDecoder;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&split, bytes)) = data.split_first() else {
        return;
    };
    let mut whole = SseDecoder::new();
    let mut at_once = Vec::new();
    let _ = whole.push(bytes, &mut at_once);
    // The same bytes in chunks give the same events.
    let mut chunked = SseDecoder::new();
    let mut in_pieces = Vec::new();
    for piece in bytes.chunks(usize::from(split).max(1)) {
        let _ = chunked.push(piece, &mut in_pieces);
    }
    assert_eq!(at_once, in_pieces);
});
