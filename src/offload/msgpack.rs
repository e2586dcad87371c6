//! A minimal MessagePack reader: what AMD's kpack archives (their table of contents) and the
//! `.rocm_kpack_ref` marker use (`kpack`). Lengths are checked against the bytes left and nesting
//! is bounded, so a damaged file is an error, never a panic or a huge allocation.

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Nil,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Bin(Vec<u8>),
    Array(Vec<Value>),
    Map(Vec<(Value, Value)>),
    Ext(i8, Vec<u8>),
}

impl Value {
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.as_map()?.iter().find(|(k, _)| k.as_str() == Some(key)).map(|(_, v)| v)
    }
    pub fn as_str(&self) -> Option<&str> {
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
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
    pub fn as_map(&self) -> Option<&[(Value, Value)]> {
        match self {
            Value::Map(m) => Some(m),
            _ => None,
        }
    }
}

/// Decodes the first value of `bytes` (what follows it is ignored, as msgpack's `unpack`
/// of a stream does).
pub fn decode(bytes: &[u8]) -> Result<Value, String> {
    let mut r = Reader { b: bytes, at: 0 };
    r.value(0)
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
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
    fn str(&mut self, n: usize) -> Result<Value, String> {
        let at = self.at;
        String::from_utf8(self.take(n)?.to_vec())
            .map(Value::Str)
            .map_err(|_| format!("MessagePack string at byte {at} is not UTF-8"))
    }
    fn array(&mut self, n: usize, depth: usize) -> Result<Value, String> {
        (0..n).map(|_| self.value(depth + 1)).collect::<Result<_, _>>().map(Value::Array)
    }
    fn map(&mut self, n: usize, depth: usize) -> Result<Value, String> {
        (0..n)
            .map(|_| Ok((self.value(depth + 1)?, self.value(depth + 1)?)))
            .collect::<Result<_, String>>()
            .map(Value::Map)
    }
    fn value(&mut self, depth: usize) -> Result<Value, String> {
        if depth > 64 {
            return Err("MessagePack nested deeper than 64".into());
        }
        let at = self.at;
        let t = self.take(1)?[0];
        Ok(match t {
            0x00..=0x7f => Value::Int(t.into()),
            0x80..=0x8f => return self.map(usize::from(t & 0x0f), depth),
            0x90..=0x9f => return self.array(usize::from(t & 0x0f), depth),
            0xa0..=0xbf => return self.str(usize::from(t & 0x1f)),
            0xc0 => Value::Nil,
            0xc2 => Value::Bool(false),
            0xc3 => Value::Bool(true),
            0xc4..=0xc6 => {
                let n = self.len(1 << (t - 0xc4))?;
                Value::Bin(self.take(n)?.to_vec())
            }
            0xc7..=0xc9 => {
                let n = self.len(1 << (t - 0xc7))?;
                let kind = self.take(1)?[0] as i8;
                Value::Ext(kind, self.take(n)?.to_vec())
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
                Value::Ext(kind, self.take(1 << (t - 0xd4))?.to_vec())
            }
            0xd9..=0xdb => {
                let n = self.len(1 << (t - 0xd9))?;
                return self.str(n);
            }
            0xdc | 0xdd => {
                let n = self.len(if t == 0xdc { 2 } else { 4 })?;
                return self.array(n, depth);
            }
            0xde | 0xdf => {
                let n = self.len(if t == 0xde { 2 } else { 4 })?;
                return self.map(n, depth);
            }
            0xe0..=0xff => Value::Int(i128::from(t as i8)),
            0xc1 => return Err(format!("MessagePack byte 0xc1 (never used) at byte {at}")),
        })
    }
}
