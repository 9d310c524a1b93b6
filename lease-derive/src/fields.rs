//! The struct's fields and key as Diesel reads them: each field with the column it maps to
//! (`#[diesel(column_name = …)]`, else its own name) and the primary-key columns. What the
//! checks (`valid.rs`, `fit.rs`) and the model (`model.rs`) all start from.

use syn::{Data, DeriveInput, Fields, Ident, Type};

use crate::attrs::{self, DieselStructAttrs};

/// A struct field and the column it maps to.
#[derive(Clone)]
pub(crate) struct Field {
    pub(crate) ident: Ident,
    pub(crate) column: Ident,
    pub(crate) ty: Type,
}

/// The struct's named fields with their columns; an error at the struct for anything else.
pub(crate) fn struct_fields(input: &DeriveInput) -> syn::Result<Vec<Field>> {
    let Data::Struct(data) = &input.data else {
        return Err(syn::Error::new(
            input.ident.span(),
            "`#[derive(Claimable)]` works on structs with named fields (Diesel models)\nhelp: derive it on the struct that maps the table's rows, next to `Queryable` and `Selectable`",
        ));
    };
    let Fields::Named(named) = &data.fields else {
        return Err(syn::Error::new(
            input.ident.span(),
            "`#[derive(Claimable)]` needs named fields, as Diesel's `Selectable` does\nhelp: name the fields after the table's columns, e.g. `struct Job { id: i64, status: String }`",
        ));
    };
    let mut fields = Vec::new();
    for f in &named.named {
        let ident = f
            .ident
            .clone()
            .ok_or_else(|| syn::Error::new(input.ident.span(), "unnamed field"))?;
        let mut column = ident.clone();
        for attr in f.attrs.iter().filter(|a| a.path().is_ident("diesel")) {
            if let Some(c) = attrs::diesel_column_name(attr)? {
                column = c;
            }
        }
        fields.push(Field {
            ident,
            column,
            ty: f.ty.clone(),
        });
    }
    Ok(fields)
}

/// The primary-key columns as Diesel reads them: `#[diesel(primary_key(…))]`, else `id`.
pub(crate) fn primary_key(input: &DeriveInput, diesel: &DieselStructAttrs) -> Vec<Ident> {
    diesel
        .primary_key
        .clone()
        .unwrap_or_else(|| vec![Ident::new("id", input.ident.span())])
}

/// The field that maps `column`.
pub(crate) fn field<'f>(fields: &'f [Field], column: &Ident) -> Option<&'f Field> {
    fields.iter().find(|f| f.column == *column)
}
