//! The chunked transfer coding (RFC 9112 section 7.1), tracked byte by byte
//! without decoding: the caller forwards the bytes as they are, this only
//! finds where the body ends. State is a few integers, whatever the split.

use super::framing::FramingError;

/// The longest chunk-size line accepted, without its CRLF: the size, any
/// whitespace and extensions.
pub const MAX_CHUNK_LINE: usize = 1024;

/// The largest trailer section accepted, counting every byte after the
/// last-chunk line up to and including the final CRLF.
pub const MAX_TRAILER_SECTION: usize = 32 * 1024;

/// Where the decoder is within the chunked body.
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// In the hex digits of a chunk size: `size` so far, `digits` seen and
    /// `line` bytes of the line so far.
    Size {
        size: u64,
        digits: usize,
        line: usize,
    },
    /// After the size: whitespace or an extension until CR. `ext` once a
    /// `;` was seen (whitespace alone may only precede a `;` or the CR).
    Ext { size: u64, line: usize, ext: bool },
    /// Saw the CR ending a chunk-size line; an LF must follow.
    SizeLf { size: u64 },
    /// Inside chunk data with `left` bytes to go.
    Data { left: u64 },
    /// After chunk data: a CR must follow.
    DataCr,
    /// After chunk data and CR: an LF must follow.
    DataLf,
    /// In the trailer section: `total` bytes so far, `empty` while the
    /// current line has no bytes yet.
    Trailer { total: usize, empty: bool },
    /// Saw a CR in the trailer section; an LF must follow. `last` if it
    /// ended an empty line, which ends the body.
    TrailerLf { total: usize, last: bool },
    /// The whole body went past.
    Done,
    /// A framing error; returned again on every later call.
    Failed(FramingError),
}

/// Tracks a chunked body. See [`crate::protocol::http1::Body::advance`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Chunked {
    state: State,
}

impl Chunked {
    /// At the start of the first chunk-size line.
    pub(super) fn new() -> Chunked {
        Chunked {
            state: State::Size {
                size: 0,
                digits: 0,
                line: 0,
            },
        }
    }

    /// The whole body, up to the end of its trailer section, went past.
    pub(super) fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// How many bytes from the front of `buf` belong to the body.
    pub(super) fn advance(&mut self, buf: &[u8]) -> Result<usize, FramingError> {
        let mut i = 0;
        while i < buf.len() {
            match self.state {
                State::Done => break,
                State::Failed(ref e) => return Err(e.clone()),
                State::Data { left } => {
                    let take =
                        usize::try_from(left).map_or(buf.len() - i, |l| l.min(buf.len() - i));
                    i += take;
                    let left = left - take as u64;
                    self.state = if left == 0 {
                        State::DataCr
                    } else {
                        State::Data { left }
                    };
                }
                _ => {
                    match step(&self.state, buf[i]) {
                        Ok(next) => self.state = next,
                        Err(e) => {
                            self.state = State::Failed(e.clone());
                            return Err(e);
                        }
                    }
                    i += 1;
                }
            }
        }
        if let State::Failed(ref e) = self.state {
            return Err(e.clone());
        }
        Ok(i)
    }
}

/// The state after `byte` in any state but `Data`, `Done` and `Failed`.
fn step(state: &State, byte: u8) -> Result<State, FramingError> {
    Ok(match *state {
        State::Size { size, digits, line } => {
            let line = grow_line(line, byte)?;
            if let Some(d) = hex_value(byte) {
                let size = size
                    .checked_mul(16)
                    .and_then(|s| s.checked_add(u64::from(d)))
                    .ok_or(FramingError::ChunkSizeOverflow)?;
                State::Size {
                    size,
                    digits: digits + 1,
                    line,
                }
            } else if digits == 0 {
                return Err(FramingError::InvalidChunkSize);
            } else {
                size_line_byte(size, line, false, byte)?
            }
        }
        // Whitespace may precede `;` but not end the line.
        State::Ext { ext: false, .. } if byte == b'\r' => {
            return Err(FramingError::InvalidChunkSize)
        }
        State::Ext { size, line, ext } => size_line_byte(size, grow_line(line, byte)?, ext, byte)?,
        State::SizeLf { size } => {
            if byte != b'\n' {
                return Err(FramingError::BadLineEnding);
            }
            if size == 0 {
                State::Trailer {
                    total: 0,
                    empty: true,
                }
            } else {
                State::Data { left: size }
            }
        }
        State::DataCr => {
            if byte != b'\r' {
                return Err(FramingError::MissingChunkCrlf);
            }
            State::DataLf
        }
        State::DataLf => {
            if byte != b'\n' {
                return Err(FramingError::MissingChunkCrlf);
            }
            State::Size {
                size: 0,
                digits: 0,
                line: 0,
            }
        }
        State::Trailer { total, empty } => {
            let total = grow_trailer(total)?;
            match byte {
                b'\r' => State::TrailerLf { total, last: empty },
                b'\n' => return Err(FramingError::BadLineEnding),
                b if is_field_byte(b) => State::Trailer {
                    total,
                    empty: false,
                },
                _ => return Err(FramingError::InvalidTrailer),
            }
        }
        State::TrailerLf { total, last } => {
            let total = grow_trailer(total)?;
            if byte != b'\n' {
                return Err(FramingError::BadLineEnding);
            }
            if last {
                State::Done
            } else {
                State::Trailer { total, empty: true }
            }
        }
        State::Data { .. } | State::Done | State::Failed(_) => {
            unreachable!("handled by Chunked::advance")
        }
    })
}

/// After the chunk size: `;` starts an extension, SP/HTAB is bad whitespace
/// (allowed before `;`), CR ends the line. Inside an extension any field
/// byte goes.
fn size_line_byte(size: u64, line: usize, ext: bool, byte: u8) -> Result<State, FramingError> {
    match byte {
        b'\r' => Ok(State::SizeLf { size }),
        b'\n' => Err(FramingError::BadLineEnding),
        b';' => Ok(State::Ext {
            size,
            line,
            ext: true,
        }),
        b' ' | b'\t' => Ok(State::Ext { size, line, ext }),
        b if ext && is_field_byte(b) => Ok(State::Ext { size, line, ext }),
        _ => Err(FramingError::InvalidChunkSize),
    }
}

/// One more byte on a chunk-size line, within [`MAX_CHUNK_LINE`] (the CR
/// ending the line is not counted).
fn grow_line(line: usize, byte: u8) -> Result<usize, FramingError> {
    if byte == b'\r' {
        return Ok(line);
    }
    if line >= MAX_CHUNK_LINE {
        return Err(FramingError::ChunkLineTooLong);
    }
    Ok(line + 1)
}

/// One more byte in the trailer section, within [`MAX_TRAILER_SECTION`].
fn grow_trailer(total: usize) -> Result<usize, FramingError> {
    if total >= MAX_TRAILER_SECTION {
        return Err(FramingError::TrailersTooLarge);
    }
    Ok(total + 1)
}

/// A byte allowed inside a line (field value or extension): HTAB, SP,
/// visible ASCII, obs-text. Not CR, LF, other controls or DEL.
fn is_field_byte(b: u8) -> bool {
    b == b'\t' || (b >= 0x20 && b != 0x7f)
}

/// The value of a hex digit.
fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}
