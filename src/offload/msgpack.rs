//! A minimal MessagePack reader: what AMD's kpack archives (their table of contents) and the
//! `.rocm_kpack_ref` marker use (`kpack`). Nothing is copied or built: a value borrows its
//! bytes, and an array or map is read element by element when it is walked, so what a length
//! field says can cost no memory (a 30 MB table of one-byte elements decoded into a tree took
//! 32 bytes per element). [`decode`] walks the whole first value once to check it (lengths
//! against the bytes left, strings UTF-8, nesting at most 64 deep), so damage is an error there,
//! never a panic, and the walks after it cannot fail.

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    Nil,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(&'a str),
    Bin(&'a [u8]),
    Array(Seq<'a>),
    Map(Seq<'a>),
    Ext(i8, &'a [u8]),
}

/// An array's or map's elements, not yet read: the bytes from its first element on, and how
/// many elements (pairs, for a map) it has.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Seq<'a> {
    bytes: &'a [u8],
    len: usize,
    depth: usize,
}

impl<'a> Seq<'a> {
    /// The number of elements (of pairs, for a map).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn values(self, per: usize) -> Values<'a> {
        Values { r: Reader { b: self.bytes, at: 0 }, left: self.len * per, depth: self.depth }
    }
}

/// The elements of a [`Seq`], read one at a time.
pub struct Values<'a> {
    r: Reader<'a>,
    left: usize,
    depth: usize,
}

impl<'a> Iterator for Values<'a> {
    type Item = Value<'a>;
    fn next(&mut self) -> Option<Value<'a>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        // `decode` checked every byte of it: reading it again cannot fail (and would end here).
        self.r.value(self.depth).ok()
    }
}

/// A map's pairs, read one at a time.
pub struct Pairs<'a>(Values<'a>);

impl<'a> Iterator for Pairs<'a> {
    type Item = (Value<'a>, Value<'a>);
    fn next(&mut self) -> Option<(Value<'a>, Value<'a>)> {
        Some((self.0.next()?, self.0.next()?))
    }
}

impl<'a> Value<'a> {
    /// A map's value for the string key `key` (the first pair with it).
    pub fn get(&self, key: &str) -> Option<Value<'a>> {
        self.as_map()?.find(|(k, _)| k.as_str() == Some(key)).map(|(_, v)| v)
    }
    pub fn as_str(&self) -> Option<&'a str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Value::Int(i) => u64::try_from(*i).ok(),
            _ => None,
        }
    }
    pub fn as_array(&self) -> Option<Values<'a>> {
        match self {
            Value::Array(s) => Some(s.values(1)),
            _ => None,
        }
    }
    pub fn as_map(&self) -> Option<Pairs<'a>> {
        match self {
            Value::Map(s) => Some(Pairs(s.values(2))),
            _ => None,
        }
    }
}

/// Decodes the first value of `bytes` (what follows it is ignored, as msgpack's `unpack`
/// of a stream does), checking all of it.
pub fn decode(bytes: &[u8]) -> Result<Value<'_>, String> {
    Reader { b: bytes, at: 0 }.value(0)
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len()).ok_or_else(|| {
            format!("MessagePack ends early: {n} bytes wanted at byte {}, {} there", self.at, self.b.len())
        })?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn uint(&mut self, n: usize) -> Result<u64, String> {
        Ok(self.take(n)?.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b)))
    }
    fn len(&mut self, n: usize) -> Result<usize, String> {
        let l = self.uint(n)? as usize;
        // Every element takes at least a byte: a longer count than bytes left is damage.
        if l > self.b.len() - self.at {
            return Err(format!("MessagePack length {l} at byte {} is longer than the data left", self.at));
        }
        Ok(l)
    }
    fn str(&mut self, n: usize) -> Result<Value<'a>, String> {
        let at = self.at;
        std::str::from_utf8(self.take(n)?)
            .map(Value::Str)
            .map_err(|_| format!("MessagePack string at byte {at} is not UTF-8"))
    }
    /// An array or map of `n` elements (pairs: `per` = 2) starting here: checked by reading
    /// every element, and left as a [`Seq`] of the bytes they took.
    fn seq(&mut self, n: usize, per: usize, depth: usize) -> Result<Seq<'a>, String> {
        let start = self.at;
        for _ in 0..n * per {
            self.value(depth + 1)?;
        }
        Ok(Seq { bytes: &self.b[start..self.at], len: n, depth: depth + 1 })
    }
    fn value(&mut self, depth: usize) -> Result<Value<'a>, String> {
        if depth > 64 {
            return Err("MessagePack nested deeper than 64".into());
        }
        let at = self.at;
        let t = self.take(1)?[0];
        Ok(match t {
            0x00..=0x7f => Value::Int(t.into()),
            0x80..=0x8f => Value::Map(self.seq(usize::from(t & 0x0f), 2, depth)?),
            0x90..=0x9f => Value::Array(self.seq(usize::from(t & 0x0f), 1, depth)?),
            0xa0..=0xbf => return self.str(usize::from(t & 0x1f)),
            0xc0 => Value::Nil,
            0xc2 => Value::Bool(false),
            0xc3 => Value::Bool(true),
            0xc4..=0xc6 => {
                let n = self.len(1 << (t - 0xc4))?;
                Value::Bin(self.take(n)?)
            }
            0xc7..=0xc9 => {
                let n = self.len(1 << (t - 0xc7))?;
                let kind = self.take(1)?[0] as i8;
                Value::Ext(kind, self.take(n)?)
            }
            0xca => Value::Float(f32::from_bits(self.uint(4)? as u32).into()),
            0xcb => Value::Float(f64::from_bits(self.uint(8)?)),
            0xcc..=0xcf => Value::Int(self.uint(1 << (t - 0xcc))?.into()),
            0xd0..=0xd3 => {
                let n = 1 << (t - 0xd0);
                let u = self.uint(n)?;
                let shift = 64 - 8 * n as u32;
                Value::Int((((u << shift) as i64) >> shift).into())
            }
            0xd4..=0xd8 => {
                let kind = self.take(1)?[0] as i8;
                Value::Ext(kind, self.take(1 << (t - 0xd4))?)
            }
            0xd9..=0xdb => {
                let n = self.len(1 << (t - 0xd9))?;
                return self.str(n);
            }
            0xdc | 0xdd => {
                let n = self.len(if t == 0xdc { 2 } else { 4 })?;
                Value::Array(self.seq(n, 1, depth)?)
            }
            0xde | 0xdf => {
                let n = self.len(if t == 0xde { 2 } else { 4 })?;
                Value::Map(self.seq(n, 2, depth)?)
            }
            0xe0..=0xff => Value::Int(i128::from(t as i8)),
            0xc1 => return Err(format!("MessagePack byte 0xc1 (never used) at byte {at}")),
        })
    }
}
