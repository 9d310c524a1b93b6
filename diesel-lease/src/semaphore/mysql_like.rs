// Included twice by `mod.rs`, as `mysql` (Diesel's `Mysql`, `MysqlConnection`) and as
// `mariadb` (`Mariadb`, `MariadbConnection`): `Db` and `Conn` are that module's backend and
// connection types. See the module's docs there.
use diesel::prelude::*;

use super::control::{ControlDialect, ControlRequests, ControlTable, Insert, OnEveryConnection};
use super::statements::{new_ticket_values, semaphore_statements, NewTicket, SemaphoreStatements};

impl SemaphoreStatements for Conn {
    semaphore_statements!(lock: [.for_update()], write_set: write_resource_row);

    fn create_resource(&mut self, resource: &str, permits: i32) -> QueryResult<()> {
        use super::schema::diesel_lease_semaphores as resources;
        diesel::insert_or_ignore_into(resources::table)
            .values((
                resources::resource.eq(resource),
                resources::permits.eq(permits),
            ))
            .execute(self)
            .map(drop)
    }

    fn insert_ticket(&mut self, new: &NewTicket<'_>) -> QueryResult<i64> {
        use super::schema::diesel_lease_semaphore_tickets as tickets;
        let insert = diesel::insert_into(tickets::table).values(new_ticket_values!(new));
        crate::backend::MysqlLike::insert_returning_id(self, insert, "ticket")
    }
}

/// Writes the locked resource row (its permit count changed and put back), so that the
/// transaction's write set holds it.
///
/// On one server the `FOR UPDATE` lock alone serializes the transactions of a resource. A
/// multi-primary cluster (MariaDB Galera) does not replicate row locks: two nodes each lock
/// their own copy of the row, read the same queue, and both commit. What it does certify is the
/// rows a transaction writes: of two transactions that wrote the same row concurrently, the
/// second to commit fails with a deadlock error (and is retried), and a local transaction
/// holding the row is aborted when a replicated write of it arrives. A write that leaves the
/// value unchanged is not in the write set (measured on MariaDB 10.11 with Galera 4), hence two
/// writes.
///
/// Only a transaction that grants writes it ([`SemaphoreStatements::certify`]): one that grants
/// nobody (a waiter's poll, a new request that must wait, a release with nobody waiting) cannot
/// raise the number of holders, whatever it did not see, and two that grant both write the row,
/// so one of them fails certification. Polls that wrote it too made every poll of one node
/// conflict with every poll of another: under load a release lost certification sixteen times
/// in a row and its error reached the caller.
///
/// It is not enough on its own: looped under load with clients on three nodes, Galera let two
/// such grants both commit a few times in a hundred runs (`tests/faults/galera.rs`, the
/// `#[ignore]`d reproductions). The `beyond_one_server` guide asks for every client of a semaphore on one node.
fn write_resource_row(c: &mut Conn, resource: &str, permits: i32) -> QueryResult<()> {
    use super::schema::diesel_lease_semaphores as resources;
    let other = if permits == i32::MAX {
        permits - 1
    } else {
        permits + 1
    };
    for value in [other, permits] {
        diesel::update(resources::table.find(resource))
            .set(resources::permits.eq(value))
            .execute(c)?;
    }
    Ok(())
}

impl ControlDialect for Conn {
    fn insert_request<T: ControlTable>(&mut self, insert: Insert<'_, T>) -> QueryResult<i64> {
        if <Self as crate::backend::MysqlLike>::INSERT_RETURNING {
            return insert.returning_ticket().get_result(self);
        }
        insert.execute(self)?;
        crate::backend::MysqlLike::inserted_id(self)
    }

    fn requests_on(table: &dyn OnEveryConnection) -> &dyn ControlRequests<Self> {
        table
    }
}
