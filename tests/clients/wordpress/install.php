<?php
// WordPress's installer, run from the command line as wp-admin/install.php runs it, against
// DB_NAME on 127.0.0.1:$PORT; then a post written, read, searched and trashed, and expired
// transients purged (WordPress's self-join DELETE). Prints what a test compares between
// server-shim and MariaDB. WP_ROOT is Debian's wordpress package, extracted
// (tests/clients/install); its own wp-config.php reads /etc/wordpress, so this script sets the
// configuration itself and loads wp-settings.php as a wp-config.php would.
error_reporting(E_ALL & ~E_DEPRECATED & ~E_NOTICE & ~E_WARNING);
foreach (['WP_ROOT', 'PORT', 'DB_NAME', 'DB_USER'] as $name) {
    if (getenv($name) === false) {
        fwrite(STDERR, "$name is not set\n");
        exit(2);
    }
}
$_SERVER['HTTP_HOST'] = 'localhost';
$_SERVER['SERVER_NAME'] = 'localhost';
$_SERVER['REQUEST_URI'] = '/';
$_SERVER['REQUEST_METHOD'] = 'GET';
$_SERVER['SERVER_PROTOCOL'] = 'HTTP/1.1';

define('WP_INSTALLING', true);
define('ABSPATH', rtrim(getenv('WP_ROOT'), '/') . '/');
define('WP_CONTENT_DIR', ABSPATH . 'wp-content');
define('DB_NAME', getenv('DB_NAME'));
define('DB_USER', getenv('DB_USER'));
define('DB_PASSWORD', (string) getenv('DB_PASSWORD'));
define('DB_HOST', '127.0.0.1:' . getenv('PORT'));
define('DB_CHARSET', 'utf8mb4');
define('DB_COLLATE', '');
define('WP_DEBUG', false);
define('DISABLE_WP_CRON', true);
$table_prefix = 'wp_';

require ABSPATH . 'wp-settings.php';
require_once ABSPATH . 'wp-admin/includes/upgrade.php';

$wpdb->show_errors(false);
$errors = [];
function note_db_error($what)
{
    global $wpdb, $errors;
    if ($wpdb->last_error !== '') {
        $errors[] = "$what: " . $wpdb->last_error . ' [' . $wpdb->last_query . ']';
    }
}

$installed = wp_install('Perceptron blog', 'admin', 'admin@example.com', false, '', 'Adm1n-pass-42');
note_db_error('install');
// Installed: transients and options go to the database from here on, as in a request.
wp_installing(false);
echo 'installed user ', $installed['user_id'], "\n";
echo 'blogname ', get_option('blogname'), "\n";
echo 'tables ', count($wpdb->get_col("SHOW TABLES LIKE 'wp\\_%'")), "\n";

$user = get_user_by('login', 'admin');
echo 'admin ', $user->user_email, ' password ', wp_check_password('Adm1n-pass-42', $user->user_pass, $user->ID) ? 'ok' : 'wrong', "\n";

$id = wp_insert_post([
    'post_title' => 'Paused databases cost nothing',
    'post_content' => 'A relay answers the handshake and wakes the compute.',
    'post_status' => 'publish',
    'post_author' => $user->ID,
    'tags_input' => ['serverless', 'mysql'],
], true);
note_db_error('insert post');
echo 'post ', is_wp_error($id) ? $id->get_error_message() : get_post($id)->post_title, "\n";
echo 'tags ', implode(',', wp_get_post_tags($id, ['fields' => 'names'])), "\n";
echo 'published ', wp_count_posts()->publish, "\n";
$found = new WP_Query(['s' => 'handshake', 'fields' => 'ids']);
echo 'search ', $found->found_posts, "\n";

set_transient('perceptron_gone', 'x', 1);
set_transient('perceptron_kept', 'y', 3600);
$wpdb->query("UPDATE {$wpdb->options} SET option_value = '1' WHERE option_name = '_transient_timeout_perceptron_gone'");
wp_cache_flush();
delete_expired_transients(true);
note_db_error('purge transients');
wp_cache_flush();
echo 'transients gone=', var_export(get_transient('perceptron_gone'), true), ' kept=', get_transient('perceptron_kept'),
    ' rows=', $wpdb->get_var("SELECT COUNT(*) FROM {$wpdb->options} WHERE option_name LIKE '\\_transient%perceptron%'"), "\n";

wp_trash_post($id);
echo 'after trash published ', wp_count_posts()->publish, "\n";
foreach ($errors as $e) {
    echo 'db error ', $e, "\n";
}
// Every statement WordPress saw fail, installer included (wpdb records them all).
global $EZSQL_ERROR;
foreach ((array) $EZSQL_ERROR as $e) {
    echo 'failed ', preg_replace('/\s+/', ' ', trim($e['query'])), ' => ', $e['error_str'], "\n";
}
