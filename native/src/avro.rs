//! Avro binary primitives: a zero-copy reader for the two input schemas and a
//! writer for the output records.
//!
//! The reader is deliberately stricter than fastavro: anything it does not
//! accept (an over-long varint, a negative length or block count, a length past
//! the end, invalid UTF-8) is reported as `Malformed`, and the caller hands the
//! record to the Python reference, whose exact error text we cannot reproduce.
//! Everything it does accept, fastavro decodes to the same values and the same
//! end position (see the module docs of `core`).

/// The body could not be decoded by the strict reader (the Python reference decides).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

pub type ReadResult<T> = Result<T, Malformed>;

pub struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Reader { data, pos: 0 }
    }

    #[inline]
    pub fn position(&self) -> usize {
        self.pos
    }

    /// A zig-zag varint of at most 10 bytes whose value fits 64 bits.
    #[inline]
    pub fn long(&mut self) -> ReadResult<i64> {
        let mut n: u64 = 0;
        let mut shift: u32 = 0;
        loop {
            let b = *self.data.get(self.pos).ok_or(Malformed)?;
            self.pos += 1;
            if shift == 63 && b > 1 {
                // A tenth byte may only carry the top bit (and no continuation).
                return Err(Malformed);
            }
            n |= u64::from(b & 0x7F) << shift;
            if b & 0x80 == 0 {
                break;
            }
            shift += 7;
            if shift > 63 {
                return Err(Malformed);
            }
        }
        Ok(((n >> 1) as i64) ^ -((n & 1) as i64))
    }

    #[inline]
    pub fn bytes(&mut self) -> ReadResult<&'a [u8]> {
        let len = self.long()?;
        if len < 0 {
            return Err(Malformed);
        }
        let len = usize::try_from(len).map_err(|_| Malformed)?;
        if self.data.len() - self.pos < len {
            return Err(Malformed);
        }
        let out = &self.data[self.pos..self.pos + len];
        self.pos += len;
        Ok(out)
    }

    #[inline]
    pub fn string(&mut self) -> ReadResult<&'a str> {
        std::str::from_utf8(self.bytes()?).map_err(|_| Malformed)
    }

    /// The item count of the next array block: 0 ends the array. Negative
    /// counts (blocks with a byte size) are valid Avro but never written by our
    /// encoders; they are left to the reference.
    #[inline]
    pub fn block_count(&mut self) -> ReadResult<u64> {
        let count = self.long()?;
        if count < 0 {
            return Err(Malformed);
        }
        Ok(count as u64)
    }
}

// ---------------------------------------------------------------------------
// writing
// ---------------------------------------------------------------------------

#[inline]
pub fn put_long(buf: &mut Vec<u8>, value: i64) {
    let mut n = ((value << 1) ^ (value >> 63)) as u64;
    while n > 0x7F {
        buf.push((n as u8 & 0x7F) | 0x80);
        n >>= 7;
    }
    buf.push(n as u8);
}

/// An Avro `int` (the caller guarantees the value fits 32 bits).
#[inline]
pub fn put_int(buf: &mut Vec<u8>, value: i32) {
    put_long(buf, i64::from(value));
}

#[inline]
pub fn put_bytes(buf: &mut Vec<u8>, value: &[u8]) {
    put_long(buf, value.len() as i64);
    buf.extend_from_slice(value);
}

#[inline]
pub fn put_str(buf: &mut Vec<u8>, value: &str) {
    put_bytes(buf, value.as_bytes());
}

#[inline]
pub fn put_bool(buf: &mut Vec<u8>, value: bool) {
    buf.push(u8::from(value));
}

/// `["null", "string"]`
#[inline]
pub fn put_opt_str(buf: &mut Vec<u8>, value: Option<&str>) {
    match value {
        None => buf.push(0),
        Some(s) => {
            buf.push(2);
            put_str(buf, s);
        }
    }
}

/// `["null", "bytes"]`
#[inline]
pub fn put_opt_bytes(buf: &mut Vec<u8>, value: Option<&[u8]>) {
    match value {
        None => buf.push(0),
        Some(b) => {
            buf.push(2);
            put_bytes(buf, b);
        }
    }
}
