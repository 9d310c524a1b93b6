//! What the derive can tell of a field's type from its syntax alone: whether it is an `Option`,
//! and whether it is text, an integer or a boolean. A type the derive does not recognise (an
//! alias, an enum, a newtype) is `Unknown`: its mistakes are left to the compiler's type checks,
//! which the expansion spans at the attribute.

use syn::{GenericArgument, PathArguments, Type};

/// The kind of value a field holds, as far as its spelling tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `String`.
    Text,
    /// A primitive integer, with its range.
    Int(IntType),
    /// `bool`.
    Bool,
    /// A type that is certainly not an `Option` (a float, a timestamp type), of no kind a state
    /// literal can have.
    OtherNotNull,
    /// Anything else: an alias, an enum, a newtype.
    Unknown,
}

/// A primitive integer type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IntType {
    pub(crate) name: &'static str,
    pub(crate) min: i128,
    pub(crate) max: i128,
}

const INTS: &[IntType] = &[
    int("i8", i8::MIN as i128, i8::MAX as i128),
    int("i16", i16::MIN as i128, i16::MAX as i128),
    int("i32", i32::MIN as i128, i32::MAX as i128),
    int("i64", i64::MIN as i128, i64::MAX as i128),
    int("u8", 0, u8::MAX as i128),
    int("u16", 0, u16::MAX as i128),
    int("u32", 0, u32::MAX as i128),
    int("u64", 0, u64::MAX as i128),
];

const fn int(name: &'static str, min: i128, max: i128) -> IntType {
    IntType { name, min, max }
}

/// Types that are certainly not `Option`s though no state literal fits them: the float
/// primitives and the time and id types Diesel maps, by their last path segment.
const OTHER_NOT_NULL: &[&str] = &[
    "f32",
    "f64",
    "NaiveDateTime",
    "NaiveDate",
    "DateTime",
    "PrimitiveDateTime",
    "OffsetDateTime",
    "SystemTime",
    "Uuid",
];

/// A field's type as the derive reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FieldType {
    /// `Some(true)` for `Option<…>`, `Some(false)` for a type that is certainly not one, `None`
    /// when the spelling does not tell (an alias may be an `Option`).
    pub(crate) optional: Option<bool>,
    /// The kind of the value, inside the `Option` if there is one.
    pub(crate) kind: Kind,
}

impl FieldType {
    /// Reads `ty`.
    pub(crate) fn of(ty: &Type) -> FieldType {
        if let Some(inner) = option_inner(ty) {
            return FieldType {
                optional: Some(true),
                kind: kind(inner),
            };
        }
        let kind = kind(ty);
        FieldType {
            optional: (kind != Kind::Unknown).then_some(false),
            kind,
        }
    }

    /// Certainly not an `Option`: a column that must hold NULL cannot be read into it.
    pub(crate) fn is_not_optional(self) -> bool {
        self.optional == Some(false)
    }
}

fn strip(ty: &Type) -> &Type {
    match ty {
        Type::Group(g) => strip(&g.elem),
        Type::Paren(p) => strip(&p.elem),
        ty => ty,
    }
}

/// The path's segments' names when `ty` is a plain path (no `<T as Trait>::`), with the last
/// segment's arguments.
fn path(ty: &Type) -> Option<(Vec<String>, &PathArguments)> {
    let Type::Path(p) = strip(ty) else {
        return None;
    };
    if p.qself.is_some() {
        return None;
    }
    let args = &p.path.segments.last()?.arguments;
    Some((segment_names(&p.path), args))
}

/// Whether an attempts field of type `ty` can be sure never to read NULL: it is spelled `i16`,
/// `i32` or `i64` (a plain path, not an `Option` nor an alias the derive cannot see through).
/// Every other type counts as nullable, which is always correct, only one `COALESCE` slower.
pub(crate) fn is_plain_integer(ty: &Type) -> bool {
    path(ty).is_some_and(|(names, args)| {
        args.is_none()
            && matches!(
                names.iter().map(String::as_str).collect::<Vec<_>>()[..],
                ["i16" | "i32" | "i64"] | ["std" | "core", "primitive", "i16" | "i32" | "i64"]
            )
    })
}

/// The names of a path's segments, without their arguments: `["std", "option", "Option"]`.
pub(crate) fn segment_names(path: &syn::Path) -> Vec<String> {
    path.segments.iter().map(|s| s.ident.to_string()).collect()
}

/// `T` of `Option<T>` (also spelled `std::option::Option<T>`, `core::option::Option<T>`).
fn option_inner(ty: &Type) -> Option<&Type> {
    let (names, args) = path(ty)?;
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    if !matches!(names[..], ["Option"] | ["std" | "core", "option", "Option"]) {
        return None;
    }
    let PathArguments::AngleBracketed(args) = args else {
        return None;
    };
    match args.args.iter().collect::<Vec<_>>()[..] {
        [GenericArgument::Type(inner)] => Some(inner),
        _ => None,
    }
}

fn kind(ty: &Type) -> Kind {
    let Some((names, args)) = path(ty) else {
        return Kind::Unknown;
    };
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let plain = matches!(args, PathArguments::None);
    // A primitive, written bare or as `std::primitive::i32`.
    let primitive = match names[..] {
        [name] | ["std" | "core", "primitive", name] if plain => Some(name),
        _ => None,
    };
    if let Some(name) = primitive {
        if name == "bool" {
            return Kind::Bool;
        }
        if let Some(int) = INTS.iter().find(|i| i.name == name) {
            return Kind::Int(*int);
        }
    }
    if plain
        && matches!(
            names[..],
            ["String"] | ["std" | "alloc", "string", "String"]
        )
    {
        return Kind::Text;
    }
    match names.last() {
        Some(last) if OTHER_NOT_NULL.contains(last) => Kind::OtherNotNull,
        _ => Kind::Unknown,
    }
}

/// `ty` as a user would write it, for messages: `Option<String>`, `chrono::NaiveDateTime`.
pub(crate) fn text(ty: &Type) -> String {
    quote::quote!(#ty)
        .to_string()
        .replace(" :: ", "::")
        .replace(":: ", "::")
        .replace(" <", "<")
        .replace("< ", "<")
        .replace(" >", ">")
        .replace(" ,", ",")
        .replace("& ", "&")
}

#[cfg(test)]
mod tests {
    use super::{is_plain_integer, FieldType, Kind};

    #[test]
    fn only_a_plain_integer_is_sure_never_to_read_null() {
        let plain = |ty: &str| is_plain_integer(&syn::parse_str(ty).expect("a type"));
        assert!(plain("i32") && plain("i64") && plain("i16") && plain("std::primitive::i64"));
        // An `Option`, an alias the derive cannot see through, another type: nullable.
        assert!(!plain("Option<i32>") && !plain("Attempts") && !plain("u8"));
    }

    fn of(ty: &str) -> FieldType {
        FieldType::of(&syn::parse_str(ty).expect("a type"))
    }

    #[test]
    fn reads_what_the_spelling_tells() {
        let text = of("String");
        assert_eq!((text.optional, text.kind), (Some(false), Kind::Text));
        assert_eq!(of("std::string::String").kind, Kind::Text);
        let opt = of("std::option::Option<i16>");
        assert_eq!(opt.optional, Some(true));
        assert!(matches!(opt.kind, Kind::Int(i) if i.name == "i16" && i.min == -32768));
        assert_eq!(of("Option<bool>").kind, Kind::Bool);
        assert!(of("chrono::NaiveDateTime").is_not_optional());
        assert!(of("DateTime<Utc>").is_not_optional());
    }

    #[test]
    fn leaves_what_it_cannot_tell() {
        // An alias may be an `Option`, an enum may convert from anything.
        for ty in [
            "Code",
            "Status",
            "my::String",
            "String<T>",
            "&'static str",
            "Option<Code>",
        ] {
            let t = of(ty);
            assert_eq!(t.kind, Kind::Unknown, "{ty}");
        }
        assert_eq!(of("Code").optional, None);
        assert_eq!(of("Option<Code>").optional, Some(true));
    }

    #[test]
    fn prints_types_as_written() {
        let ty = |s: &str| super::text(&syn::parse_str(s).expect("a type"));
        assert_eq!(
            ty("Option < chrono :: NaiveDateTime >"),
            "Option<chrono::NaiveDateTime>"
        );
        assert_eq!(ty("&'a str"), "&'a str");
        assert_eq!(ty("HashMap<String, i32>"), "HashMap<String, i32>");
    }
}
