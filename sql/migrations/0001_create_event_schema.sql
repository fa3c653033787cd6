-- The schema and its enum types. Every object of the service lives in schema `event`.
CREATE SCHEMA IF NOT EXISTS event;

CREATE TYPE event.kanban_state AS ENUM ('normal', 'blocked', 'done', 'cancel');
CREATE TYPE event.interval_unit AS ENUM ('now', 'hours', 'days', 'weeks', 'months');
CREATE TYPE event.interval_kind AS ENUM
    ('after_sub', 'before_event', 'after_event_start', 'after_event', 'before_event_end');
CREATE TYPE event.notification_channel AS ENUM ('mail', 'sms');
CREATE TYPE event.template_kind AS ENUM ('mail', 'sms');
CREATE TYPE event.sale_status AS ENUM ('free', 'sold', 'to_pay');
CREATE TYPE event.sale_order_state AS ENUM ('draft', 'sent', 'sale', 'cancel');
CREATE TYPE event.question_kind AS ENUM
    ('simple_choice', 'text_box', 'name', 'email', 'phone', 'company_name');
CREATE TYPE event.badge_format AS ENUM ('A4_french_fold', 'A6', 'four_per_sheet');
CREATE TYPE event.registration_state AS ENUM ('draft', 'open', 'done', 'cancel');
CREATE TYPE event.mail_error_kind AS ENUM
    ('template_unresolved', 'template_renderer_not_composed', 'render_failed',
     'enqueue_refused', 'recipient_invalid');
CREATE TYPE event.receipt_outcome AS ENUM ('pending', 'sent', 'dropped_window_closed');
