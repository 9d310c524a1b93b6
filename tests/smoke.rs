use crate::common::{TestBackend, TestDb};

fn migrations_apply_twice<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    db.migrate();
}

backend_tests!(migrations_apply_twice);
