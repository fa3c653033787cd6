-- The SMS arm: its own failure kind, and a scheduler line's channel that follows its
-- template's kind (mail templates are mailed, sms templates are texted).
ALTER TYPE event.mail_error_kind ADD VALUE 'sms_enqueue_refused';

-- the template's kind decides: lines written before recorded the channel they asked for
-- as the kind; the template store knows the real one (a line naming a template that is not
-- in the store keeps its recorded kind)
UPDATE event.mails m SET template_kind = t.kind
FROM event.message_templates t
WHERE t.id = m.template_ref AND m.template_kind <> t.kind;
UPDATE event.type_mails m SET template_kind = t.kind
FROM event.message_templates t
WHERE t.id = m.template_ref AND m.template_kind <> t.kind;
UPDATE event.mails SET notification_channel = template_kind::text::event.notification_channel
WHERE notification_channel::text <> template_kind::text;
UPDATE event.type_mails
SET notification_channel = template_kind::text::event.notification_channel
WHERE notification_channel::text <> template_kind::text;
ALTER TABLE event.mails ADD CONSTRAINT mails_channel_follows_kind
    CHECK (notification_channel::text = template_kind::text);
ALTER TABLE event.type_mails ADD CONSTRAINT type_mails_channel_follows_kind
    CHECK (notification_channel::text = template_kind::text);


-- the template cascade deletes a (kind, template) pair's type lines too
CREATE INDEX type_mails_template_idx ON event.type_mails (template_ref);
