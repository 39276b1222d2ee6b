//! A compact binary form of serde values, for the caches only we write and read (the discovery
//! snapshot): no keys, no escapes, integers as LEB128 (signed ones zigzagged), strings and
//! sequences after their length. Reading it is a few instructions a field where JSON matched
//! each key and scanned each string for escapes (a create of 64 GPUs read its snapshot in 1.6 M
//! instructions as JSON). It describes nothing: the reader must ask for the type the writer
//! wrote, which the cache's format number and key guarantee; anything else fails or reads as
//! values that the cache's own checks then refuse.
//!
//! Reading is linear in the input: a length is checked against what is left before anything
//! is taken or reserved, and every value read consumes at least one byte but the unit types,
//! which a sequence's length bounds by the bytes left.

use serde::de::{self, DeserializeSeed, IntoDeserializer, Visitor};
use serde::ser::{self, Serialize};

/// Why a value could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cut short")]
    Eof,
    #[error("{0} bytes after the value")]
    Trailing(usize),
    #[error("a number does not fit its type")]
    Overflow,
    #[error("a length of {0} is more than the {1} bytes left")]
    Length(u64, usize),
    #[error("not UTF-8")]
    Utf8,
    #[error("a bool of {0}")]
    Bool(u8),
    #[error("an option tag of {0}")]
    OptionTag(u8),
    #[error("{0} is not in this form")]
    Unsupported(&'static str),
    #[error("{0}")]
    Custom(String),
}

impl ser::Error for Error {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        Error::Custom(msg.to_string())
    }
}

impl de::Error for Error {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        Error::Custom(msg.to_string())
    }
}

/// `value` in the compact form.
pub fn to_vec<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, Error> {
    let mut w = Writer(Vec::with_capacity(4096));
    value.serialize(&mut w)?;
    Ok(w.0)
}

/// The value of type `T` that is the whole of `bytes`.
pub fn from_slice<'de, T: de::Deserialize<'de>>(bytes: &'de [u8]) -> Result<T, Error> {
    let mut r = Reader(bytes);
    let v = T::deserialize(&mut r)?;
    match r.0.len() {
        0 => Ok(v),
        n => Err(Error::Trailing(n)),
    }
}

struct Writer(Vec<u8>);

impl Writer {
    fn uint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push(v as u8 | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn int(&mut self, v: i64) {
        self.uint(((v << 1) ^ (v >> 63)) as u64);
    }

    fn bytes(&mut self, b: &[u8]) {
        self.uint(b.len() as u64);
        self.0.extend_from_slice(b);
    }

    /// A sequence's or map's start: its length, which must be known.
    fn counted(&mut self, len: Option<usize>) -> Result<&mut Writer, Error> {
        let len = len.ok_or(Error::Unsupported("a sequence of unknown length"))?;
        self.uint(len as u64);
        Ok(self)
    }

    /// A variant's start: its index.
    fn variant(&mut self, i: u32) -> Result<&mut Writer, Error> {
        self.uint(i.into());
        Ok(self)
    }
}

/// `Serializer` methods that write an integer widened to 64 bits with `Writer::$how`.
macro_rules! ints {
    ($($name:ident: $ty:ty => $how:ident),*) => {$(
        fn $name(self, v: $ty) -> Result<(), Error> {
            self.$how(v.into());
            Ok(())
        }
    )*};
}

impl ser::Serializer for &mut Writer {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Self;
    type SerializeTuple = Self;
    type SerializeTupleStruct = Self;
    type SerializeTupleVariant = Self;
    type SerializeMap = Self;
    type SerializeStruct = Self;
    type SerializeStructVariant = Self;

    fn serialize_bool(self, v: bool) -> Result<(), Error> {
        self.0.push(u8::from(v));
        Ok(())
    }
    // Signed integers zigzagged, all as LEB128.
    ints!(
        serialize_i8: i8 => int,
        serialize_i16: i16 => int,
        serialize_i32: i32 => int,
        serialize_i64: i64 => int,
        serialize_u8: u8 => uint,
        serialize_u16: u16 => uint,
        serialize_u32: u32 => uint,
        serialize_u64: u64 => uint
    );
    fn serialize_f32(self, v: f32) -> Result<(), Error> {
        self.0.extend_from_slice(&v.to_le_bytes());
        Ok(())
    }
    fn serialize_f64(self, v: f64) -> Result<(), Error> {
        self.0.extend_from_slice(&v.to_le_bytes());
        Ok(())
    }
    fn serialize_char(self, v: char) -> Result<(), Error> {
        self.uint(u32::from(v).into());
        Ok(())
    }
    fn serialize_str(self, v: &str) -> Result<(), Error> {
        self.bytes(v.as_bytes());
        Ok(())
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<(), Error> {
        self.bytes(v);
        Ok(())
    }
    fn serialize_none(self) -> Result<(), Error> {
        self.0.push(0);
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Result<(), Error> {
        self.0.push(1);
        v.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_unit_variant(self, _: &'static str, i: u32, _: &'static str) -> Result<(), Error> {
        self.uint(i.into());
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<(), Error> {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        i: u32,
        _: &'static str,
        v: &T,
    ) -> Result<(), Error> {
        self.uint(i.into());
        v.serialize(self)
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<Self, Error> {
        self.counted(len)
    }
    fn serialize_tuple(self, _: usize) -> Result<Self, Error> {
        Ok(self)
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Self, Error> {
        Ok(self)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        i: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self, Error> {
        self.variant(i)
    }
    fn serialize_map(self, len: Option<usize>) -> Result<Self, Error> {
        self.counted(len)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self, Error> {
        Ok(self)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        i: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self, Error> {
        self.variant(i)
    }
    fn is_human_readable(&self) -> bool {
        false
    }
}

// The compound values' parts are written one after the other, with nothing between them: each
// of serde's compound traits is the same two methods.
macro_rules! compound {
    ($($trait:ident :: $method:ident),*) => {$(
        impl ser::$trait for &mut Writer {
            type Ok = ();
            type Error = Error;
            fn $method<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Error> {
                v.serialize(&mut **self)
            }
            fn end(self) -> Result<(), Error> {
                Ok(())
            }
        }
    )*};
}

compound!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

// A struct's fields by position: their names are not written.
macro_rules! fields {
    ($($trait:ident),*) => {$(
        impl ser::$trait for &mut Writer {
            type Ok = ();
            type Error = Error;
            fn serialize_field<T: Serialize + ?Sized>(
                &mut self,
                _: &'static str,
                v: &T,
            ) -> Result<(), Error> {
                v.serialize(&mut **self)
            }
            fn end(self) -> Result<(), Error> {
                Ok(())
            }
        }
    )*};
}

fields!(SerializeStruct, SerializeStructVariant);

impl ser::SerializeMap for &mut Writer {
    type Ok = ();
    type Error = Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, k: &T) -> Result<(), Error> {
        k.serialize(&mut **self)
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Error> {
        v.serialize(&mut **self)
    }
    fn end(self) -> Result<(), Error> {
        Ok(())
    }
}

struct Reader<'de>(&'de [u8]);

impl<'de> Reader<'de> {
    fn byte(&mut self) -> Result<u8, Error> {
        let (&b, rest) = self.0.split_first().ok_or(Error::Eof)?;
        self.0 = rest;
        Ok(b)
    }

    fn uint(&mut self) -> Result<u64, Error> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            // The tenth byte holds bit 63 only.
            if shift == 63 && b > 1 {
                return Err(Error::Overflow);
            }
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(Error::Overflow)
    }

    fn int(&mut self) -> Result<i64, Error> {
        let u = self.uint()?;
        Ok((u >> 1) as i64 ^ -((u & 1) as i64))
    }

    fn narrow<T: TryFrom<u64>>(&mut self) -> Result<T, Error> {
        T::try_from(self.uint()?).map_err(|_| Error::Overflow)
    }

    fn narrow_signed<T: TryFrom<i64>>(&mut self) -> Result<T, Error> {
        T::try_from(self.int()?).map_err(|_| Error::Overflow)
    }

    /// A length, no more than the bytes left (each element takes one at least, see the header).
    fn len(&mut self) -> Result<usize, Error> {
        let n = self.uint()?;
        match usize::try_from(n) {
            Ok(n) if n <= self.0.len() => Ok(n),
            _ => Err(Error::Length(n, self.0.len())),
        }
    }

    fn take(&mut self, n: usize) -> Result<&'de [u8], Error> {
        if n > self.0.len() {
            return Err(Error::Eof);
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }

    fn bytes(&mut self) -> Result<&'de [u8], Error> {
        let n = self.len()?;
        self.take(n)
    }

    fn str(&mut self) -> Result<&'de str, Error> {
        std::str::from_utf8(self.bytes()?).map_err(|_| Error::Utf8)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Error> {
        let b = self.take(N)?;
        let mut a = [0; N];
        a.copy_from_slice(b);
        Ok(a)
    }
}

/// `Deserializer` methods that read an integer with `Reader::$how` and visit it.
macro_rules! read_ints {
    ($($name:ident => $visit:ident by $how:ident),*) => {$(
        fn $name<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
            v.$visit(self.$how()?)
        }
    )*};
}

impl<'de> de::Deserializer<'de> for &mut Reader<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Error> {
        Err(Error::Unsupported("a value of unknown type"))
    }
    fn deserialize_bool<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        match self.byte()? {
            0 => v.visit_bool(false),
            1 => v.visit_bool(true),
            b => Err(Error::Bool(b)),
        }
    }
    // Each integer read at 64 bits and narrowed to its type, or refused.
    read_ints!(
        deserialize_i8 => visit_i8 by narrow_signed,
        deserialize_i16 => visit_i16 by narrow_signed,
        deserialize_i32 => visit_i32 by narrow_signed,
        deserialize_i64 => visit_i64 by int,
        deserialize_u8 => visit_u8 by narrow,
        deserialize_u16 => visit_u16 by narrow,
        deserialize_u32 => visit_u32 by narrow,
        deserialize_u64 => visit_u64 by uint
    );
    fn deserialize_f32<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        v.visit_f32(f32::from_le_bytes(self.array()?))
    }
    fn deserialize_f64<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        v.visit_f64(f64::from_le_bytes(self.array()?))
    }
    fn deserialize_char<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        let c = char::from_u32(self.narrow()?).ok_or(Error::Utf8)?;
        v.visit_char(c)
    }
    fn deserialize_str<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        v.visit_borrowed_str(self.str()?)
    }
    fn deserialize_string<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        v.visit_borrowed_str(self.str()?)
    }
    fn deserialize_bytes<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        v.visit_borrowed_bytes(self.bytes()?)
    }
    fn deserialize_byte_buf<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        v.visit_borrowed_bytes(self.bytes()?)
    }
    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        match self.byte()? {
            0 => v.visit_none(),
            1 => v.visit_some(self),
            b => Err(Error::OptionTag(b)),
        }
    }
    fn deserialize_unit<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        v.visit_unit()
    }
    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        v: V,
    ) -> Result<V::Value, Error> {
        v.visit_unit()
    }
    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        v: V,
    ) -> Result<V::Value, Error> {
        v.visit_newtype_struct(self)
    }
    fn deserialize_seq<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        let n = self.len()?;
        v.visit_seq(Items { r: self, left: n })
    }
    fn deserialize_tuple<V: Visitor<'de>>(self, n: usize, v: V) -> Result<V::Value, Error> {
        v.visit_seq(Items { r: self, left: n })
    }
    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        n: usize,
        v: V,
    ) -> Result<V::Value, Error> {
        v.visit_seq(Items { r: self, left: n })
    }
    fn deserialize_map<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        let n = self.len()?;
        v.visit_map(Items { r: self, left: n })
    }
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, Error> {
        v.visit_seq(Items {
            r: self,
            left: fields.len(),
        })
    }
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, Error> {
        v.visit_enum(self)
    }
    fn deserialize_identifier<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Error> {
        Err(Error::Unsupported("a name"))
    }
    fn deserialize_ignored_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Error> {
        Err(Error::Unsupported("a value skipped"))
    }
    fn is_human_readable(&self) -> bool {
        false
    }
}

/// The elements of a sequence, tuple or struct, or the entries of a map: `left` to read.
struct Items<'a, 'de> {
    r: &'a mut Reader<'de>,
    left: usize,
}

impl<'de> Items<'_, 'de> {
    /// The next element (a map's next key), or `None` when all `left` were read.
    fn next<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, Error> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        seed.deserialize(&mut *self.r).map(Some)
    }
}

impl<'de> de::SeqAccess<'de> for Items<'_, 'de> {
    type Error = Error;
    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        self.next(seed)
    }
    fn size_hint(&self) -> Option<usize> {
        Some(self.left)
    }
}

impl<'de> de::MapAccess<'de> for Items<'_, 'de> {
    type Error = Error;
    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        self.next(seed)
    }
    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        seed.deserialize(&mut *self.r)
    }
    fn size_hint(&self) -> Option<usize> {
        Some(self.left)
    }
}

impl<'de> de::EnumAccess<'de> for &mut Reader<'de> {
    type Error = Error;
    type Variant = Self;
    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, Self), Error> {
        let i: u32 = self.narrow()?;
        let v = seed.deserialize(i.into_deserializer())?;
        Ok((v, self))
    }
}

impl<'de> de::VariantAccess<'de> for &mut Reader<'de> {
    type Error = Error;
    fn unit_variant(self) -> Result<(), Error> {
        Ok(())
    }
    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, Error> {
        seed.deserialize(self)
    }
    fn tuple_variant<V: Visitor<'de>>(self, n: usize, v: V) -> Result<V::Value, Error> {
        v.visit_seq(Items { r: self, left: n })
    }
    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, Error> {
        v.visit_seq(Items {
            r: self,
            left: fields.len(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    enum Shape {
        Unit,
        New(u8),
        Pair(i16, String),
        Named { a: Option<u32>, b: bool },
    }

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct All {
        b: bool,
        i: [i64; 5],
        u: [u64; 4],
        small: (u8, u16, u32, i8, i16, i32),
        f: (f32, f64),
        c: char,
        s: String,
        p: std::path::PathBuf,
        o: Option<Option<String>>,
        v: Vec<Shape>,
        m: BTreeMap<String, Vec<u8>>,
        unit: (),
    }

    fn all() -> All {
        All {
            b: true,
            i: [0, -1, 1, i64::MIN, i64::MAX],
            u: [0, 127, 128, u64::MAX],
            small: (255, 65535, u32::MAX, -128, i16::MIN, i32::MIN),
            f: (1.5, -0.25),
            c: 'é',
            s: "x\"\\\n\u{10ffff}".into(),
            p: "/usr/lib/x86_64-linux-gnu/libcuda.so.1".into(),
            o: Some(None),
            v: vec![
                Shape::Unit,
                Shape::New(7),
                Shape::Pair(-3, "p".into()),
                Shape::Named {
                    a: Some(9),
                    b: false,
                },
            ],
            m: [("k".to_string(), vec![1, 2]), (String::new(), vec![])]
                .into_iter()
                .collect(),
            unit: (),
        }
    }

    #[test]
    fn what_is_written_reads_back() {
        let bytes = to_vec(&all()).unwrap();
        assert_eq!(from_slice::<All>(&bytes).unwrap(), all());
        // LEB128 and zigzag, as documented.
        assert_eq!(to_vec(&300u32).unwrap(), [0xac, 0x02]);
        assert_eq!(to_vec(&-1i32).unwrap(), [1]);
        assert_eq!(to_vec(&"ab").unwrap(), [2, b'a', b'b']);
    }

    /// Cut anywhere, or with a byte after it, the value is refused, never read as another.
    #[test]
    fn a_value_cut_short_or_followed_is_refused() {
        let bytes = to_vec(&all()).unwrap();
        for n in 0..bytes.len() {
            assert!(from_slice::<All>(&bytes[..n]).is_err(), "cut at {n}");
        }
        let mut more = bytes.clone();
        more.push(0);
        assert!(matches!(from_slice::<All>(&more), Err(Error::Trailing(1))));
    }

    /// Lengths past the input, numbers past their type, bad tags: errors, and nothing
    /// reserved for a length that is not there.
    #[test]
    fn bad_input_is_an_error() {
        let long = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert_eq!(from_slice::<u64>(&long).unwrap(), u64::MAX);
        let over = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
        assert!(matches!(from_slice::<u64>(&over), Err(Error::Overflow)));
        assert!(matches!(
            from_slice::<u8>(&[0x80, 0x02]),
            Err(Error::Overflow)
        ));
        assert!(matches!(
            from_slice::<Vec<u8>>(&long),
            Err(Error::Length(u64::MAX, 0))
        ));
        assert!(matches!(
            from_slice::<Vec<()>>(&[5, 0]),
            Err(Error::Length(5, 1))
        ));
        assert!(matches!(
            from_slice::<String>(&[2, 0xff, 0xfe]),
            Err(Error::Utf8)
        ));
        assert!(matches!(from_slice::<bool>(&[2]), Err(Error::Bool(2))));
        assert!(matches!(
            from_slice::<Option<u8>>(&[2, 0]),
            Err(Error::OptionTag(2))
        ));
        assert!(from_slice::<Shape>(&[9]).is_err());
        assert!(matches!(
            from_slice::<serde_json::Value>(&[0]),
            Err(Error::Unsupported(_))
        ));
    }
}
